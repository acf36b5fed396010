/*
 * chat_template.h — turning a list of chat messages into the prompt text a
 * model was trained on.
 *
 * We do not run Jinja. A model ships a Jinja template (tokenizer_config.json
 * "chat_template" or GGUF "tokenizer.chat_template"); we recognise which
 * known family it is by distinctive markers and render that family with
 * C code. Families: ChatML (SmolLM2, Qwen), Llama-3, Llama-2/Mistral ([INST]).
 * An unrecognised template is an error unless the user names a built-in.
 * Where a recognised template injects a default system prompt (SmolLM2,
 * Qwen2), that text is extracted from the template so output matches the
 * model's own template exactly.
 */
#ifndef LG_CHAT_TEMPLATE_H
#define LG_CHAT_TEMPLATE_H

#include "engine/base/common.h"

typedef enum lg_chat_family {
    LG_CHAT_CHATML = 0,
    LG_CHAT_LLAMA3 = 1,
    LG_CHAT_LLAMA2 = 2,   /* also Mistral: [INST] ... [/INST] */
} lg_chat_family;

typedef struct lg_chat_msg {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;
} lg_chat_msg;

typedef struct lg_chat_template lg_chat_template;

/* Recognises the model's template text. builtin_name (may be NULL): "chatml",
 * "llama3", "llama2", "mistral" forces a family (used when the model's
 * template is missing or unrecognised). bos_text/eos_text are the texts of the
 * model's BOS/EOS tokens (may be NULL). */
int lg_chat_template_new(const char *jinja_text, const char *builtin_name, const char *bos_text,
                         const char *eos_text, lg_chat_template **out, lg_err *err);
void lg_chat_template_free(lg_chat_template *t); /* NULL is a no-op */
lg_chat_family lg_chat_template_family(const lg_chat_template *t);
const char *lg_chat_family_name(lg_chat_family f);

/* Renders messages with the generation prompt for the assistant appended
 * (add_generation_prompt=True). *out is malloc'd. The rendered text contains
 * the BOS text where the template writes it; callers then encode with
 * add_bos=false and parse_special=true. */
int lg_chat_template_apply(const lg_chat_template *t, const lg_chat_msg *msgs, int n_msgs,
                           char **out, lg_err *err);

#endif
