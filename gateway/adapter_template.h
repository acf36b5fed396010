/*
 * adapter_template.h — an adapter's own chat template: where a PEFT
 * directory ships it and the shared, parsed copy the requests render with.
 *
 * What PEFT / transformers save with a fine-tune: chat_template.jinja (the
 * newer layout), or tokenizer_config.json with a "chat_template" string
 * (or a list of {name, template}: the one named "default"). The file wins
 * over the JSON, as in transformers. A template is at most 1 MiB
 * (LG_ADAPTER_MAX_TEMPLATE); tokenizer_config.json at most 4 MiB (it also
 * holds the added tokens). The store keeps the text as chat_template.jinja
 * next to the adapter's files (db/adapter_files.h).
 *
 * A parsed template (lg_adapter_chat) is shared by every request of one
 * adapter version and refcounted: the registry holds one reference, each
 * request that renders with it takes one, so a replace or delete while a
 * request renders frees nothing under it. Parsed once per version (at
 * install), never per request.
 */
#ifndef LG_GW_ADAPTER_TEMPLATE_H
#define LG_GW_ADAPTER_TEMPLATE_H

#include <stddef.h>

#include "engine/base/common.h"
#include "engine/model/chat_template.h"

#define LG_ADAPTER_TOKENIZER_CONFIG_FILE "tokenizer_config.json"
#define LG_ADAPTER_MAX_TOKENIZER_CONFIG ((size_t)4 << 20) /* it also holds the added tokens */

/* The template dir ships (*text malloc'd, NUL-terminated; NULL: none) and
 * the file it came from (*file: a static name, NULL when none). A file
 * that is there but unreadable, too large or without a usable template
 * string is (-1, err naming the file). */
int lg_adapter_template_read(const char *dir, char **text, size_t *len, const char **file, lg_err *err);

typedef struct lg_adapter_chat lg_adapter_chat;

/* Parses text with the base model's BOS/EOS texts (may be NULL). A refusal
 * is (-1, err: the parser's one line). Starts with one reference. */
int lg_adapter_chat_new(const char *text, const char *bos_text, const char *eos_text, lg_adapter_chat **out,
                        lg_err *err);
lg_adapter_chat *lg_adapter_chat_ref(lg_adapter_chat *c);   /* NULL: NULL */
void lg_adapter_chat_unref(lg_adapter_chat *c);             /* NULL: no-op; the last frees */
const lg_chat_template *lg_adapter_chat_template(const lg_adapter_chat *c);

#endif
