/*
 * chat_template.h — turning a list of chat messages into the prompt text a
 * model was trained on.
 *
 * The model's own Jinja template is the source of truth: tokenizer_config.json
 * "chat_template", chat_template.jinja, GGUF "tokenizer.chat_template", an
 * adapter's own template or `--chat-template FILE`. It is run by our sandboxed
 * interpreter (jinja.h) exactly as transformers' apply_chat_template runs it:
 * messages, tools, documents, add_generation_prompt, bos_token/eos_token and
 * the template's own variables (chat_template_kwargs, e.g. Qwen3's
 * enable_thinking). Before rendering, messages are prepared the way vLLM
 * and transformers prepare them: a null or missing content becomes "" (vLLM),
 * other keys whose value is null are dropped (transformers), an
 * assistant's tool_calls[].function.arguments given as a JSON string is
 * parsed into an object, content given as a list of parts is joined into one
 * string ("\n" between text parts) unless the template loops over content,
 * and reasoning_content/thinking/reasoning are aliased as transformers does.
 * tests/chat compares our renderings with transformers' byte for byte on the
 * real templates of many model families.
 *
 * The built-in families (ChatML, Llama-3, Llama-2/Mistral [INST]) remain
 * only as the fallback for a model without a template, or when a built-in
 * name is forced; they render system/user/assistant text only.
 *
 * A template that does not parse fails at lg_chat_template_new; one that
 * raises (raise_exception), uses an unknown filter, or runs past the
 * interpreter's bounds fails the render with one line in lg_err.
 */
#ifndef LG_CHAT_TEMPLATE_H
#define LG_CHAT_TEMPLATE_H

#include <jansson.h>

#include "engine/base/common.h"

typedef enum lg_chat_family {
    LG_CHAT_CHATML = 0,
    LG_CHAT_LLAMA3 = 1,
    LG_CHAT_LLAMA2 = 2,   /* also Mistral: [INST] ... [/INST] */
    LG_CHAT_JINJA = 3,    /* the model's own template, run by the interpreter */
} lg_chat_family;

typedef struct lg_chat_msg {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;
} lg_chat_msg;

typedef struct lg_chat_template lg_chat_template;

/* Parses the model's template text (jinja_text, may be NULL). builtin_name
 * (may be NULL): "chatml", "llama3", "llama2", "mistral" forces a built-in
 * family instead (also the only choice when there is no template text).
 * bos_text/eos_text are the texts of the model's BOS/EOS tokens (may be NULL;
 * the template then sees empty strings). */
int lg_chat_template_new(const char *jinja_text, const char *builtin_name, const char *bos_text,
                         const char *eos_text, lg_chat_template **out, lg_err *err);
void lg_chat_template_free(lg_chat_template *t); /* NULL is a no-op */
lg_chat_family lg_chat_template_family(const lg_chat_template *t);
const char *lg_chat_family_name(lg_chat_family f);

/* Renders an OpenAI-shaped conversation. messages: a JSON array of message
 * objects (role; content as a string, a list of {type: "text", text} parts
 * or null; an assistant's tool_calls; a tool message's tool_call_id, ...).
 * tools, documents: JSON arrays or NULL (the template then sees none).
 * kwargs: a JSON object of extra template variables (chat_template_kwargs)
 * or NULL; they cannot replace messages, tools, documents or
 * add_generation_prompt. *out is malloc'd. The text contains the BOS text
 * where the template writes it; callers then encode with add_bos=false and
 * parse_special=true. Nothing passed in is modified. */
int lg_chat_template_render(const lg_chat_template *t, const json_t *messages, const json_t *tools,
                            const json_t *documents, const json_t *kwargs, bool add_generation_prompt,
                            char **out, lg_err *err);

/* Renders role/content messages with the generation prompt appended
 * (add_generation_prompt=True): lg_chat_template_render without tools. */
int lg_chat_template_apply(const lg_chat_template *t, const lg_chat_msg *msgs, int n_msgs,
                           char **out, lg_err *err);

#endif
