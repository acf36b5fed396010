/*
 * served_model.h — the base model as the OpenAI routes see it: its id, its
 * tokenizer and chat template, its context, and what a request gets when it
 * names no max_tokens. Filled once in app.c's create, read-only afterwards,
 * so any thread reads it without a lock (the compile cache locks itself). The tokenizer belongs to the
 * weights (which outlive it); the chat template is its own.
 */
#ifndef LG_GW_SERVED_MODEL_H
#define LG_GW_SERVED_MODEL_H

#include <stdint.h>

#include "engine/model/chat_template.h"
#include "engine/model/tokenizer.h"
#include "engine/model/weights.h"
#include "engine/runtime/constrain/constrain.h"
#include "gateway/http/serve_config.h"
#include "gateway/tool_calls.h"

typedef struct lg_served_model {
    char id[256];                 /* --served-model-name or the model's file/dir name */
    int64_t created_at;           /* Unix seconds of process start ("created" of the base model) */
    const lg_tokenizer *tok;      /* NULL: none (prompts as token ids only) */
    lg_chat_template *chat;       /* NULL: none (chat completions refused) */
    /* how tool_choice "auto" output is read: --tool-call-parser, else the parser the template's text
     * teaches (tool_calls.h); NULL: no parser (such output is plain text) */
    const lg_tc_parser *tool_parser;
    int vocab_size;
    /* the weights' quantization: lg_model_config quant_method ("none", "fp8", "awq", ...) and its description */
    char quantization[24];
    char quantization_desc[96];
    int max_context;              /* the engine's, in tokens */
    int max_token_bytes;          /* longest vocabulary entry in bytes (an upper bound per token) */
    int default_max_tokens;       /* --default-max-tokens */
    /* structured output: the vocabulary as byte strings (NULL: no tokenizer, or it could not be
     * built: response_format and grammars are then refused), the compile cache, and the limits
     * every compilation runs under (--grammar-*) */
    lg_cvocab *cvocab;
    lg_ccache *ccache;
    lg_climits climits;
} lg_served_model;

/* Fills m from the loaded weights and the options (--served-model-name,
 * --chat-template: a built-in family's name or a Jinja template file,
 * --tool-call-parser, --default-max-tokens); max_context is the engine's,
 * created_at the process's start. A model without a usable chat template
 * of its own gets chat NULL (not an error); a --chat-template file that
 * cannot be read or parsed is (-1, err set). */
int lg_served_model_init(lg_served_model *m, const lg_weights *w, const lg_serve_config *cfg, int max_context,
                         int64_t created_at, lg_err *err);
void lg_served_model_dispose(lg_served_model *m);

#endif
