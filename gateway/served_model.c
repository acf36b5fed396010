/*
 * served_model.c — see served_model.h.
 */
#include "gateway/served_model.h"

#include <stdio.h>
#include <string.h>

/* "models/SmolLM2-135M-Instruct/" -> "SmolLM2-135M-Instruct"; "x/m.gguf" -> "m" */
static void model_id_from_path(char *out, size_t n, const char *path)
{
    const char *b = path + strlen(path);
    while (b > path && b[-1] == '/')
        b--;
    const char *end = b;
    while (b > path && b[-1] != '/')
        b--;
    size_t len = (size_t)(end - b);
    if (len > 5 && !strncmp(end - 5, ".gguf", 5))
        len -= 5;
    snprintf(out, n, "%.*s", (int)len, b);
}

void lg_served_model_init(lg_served_model *m, const lg_weights *w, const lg_serve_config *cfg, int max_context,
                          int64_t created_at)
{
    memset(m, 0, sizeof *m);
    m->created_at = created_at;
    m->vocab_size = lg_weights_config(w)->vocab_size;
    m->max_context = max_context;
    m->default_max_tokens = (int)cfg->default_max_tokens;
    m->tok = lg_weights_tokenizer(w);
    if (m->tok) {
        for (int i = 0; i < lg_tokenizer_n_vocab(m->tok); i++) {
            const char *tt = lg_tokenizer_token_text(m->tok, i);
            int len = tt ? (int)strlen(tt) : 0;
            if (len > m->max_token_bytes)
                m->max_token_bytes = len;
        }
        int bos = lg_tokenizer_bos(m->tok), eos = lg_tokenizer_eos(m->tok);
        lg_err cerr = {{0}};
        if (lg_chat_template_new(lg_weights_chat_template(w), cfg->chat_template,
                                 bos >= 0 ? lg_tokenizer_token_text(m->tok, bos) : NULL,
                                 eos >= 0 ? lg_tokenizer_token_text(m->tok, eos) : NULL, &m->chat, &cerr) != 0)
            m->chat = NULL;
        const lg_model_config *mc = lg_weights_config(w);
        lg_err verr = {{0}};
        if (lg_cvocab_from_tokenizer(m->tok, mc->eos_ids, mc->n_eos, &m->cvocab, &verr) != 0)
            m->cvocab = NULL;
    }
    lg_climits_default(&m->climits);
    m->climits.max_compile_ms = (int)cfg->grammar_compile_ms;
    m->climits.max_dfa_states = (int)cfg->grammar_max_states;
    m->climits.max_depth = (int)cfg->grammar_max_depth;
    if (m->cvocab)
        m->ccache = lg_ccache_new(4096, (size_t)cfg->grammar_cache_mb << 20);
    if (cfg->served_model_name)
        snprintf(m->id, sizeof m->id, "%s", cfg->served_model_name);
    else
        model_id_from_path(m->id, sizeof m->id, cfg->model);
}

void lg_served_model_dispose(lg_served_model *m)
{
    lg_chat_template_free(m->chat);
    m->chat = NULL;
    lg_ccache_free(m->ccache); /* before the vocabulary its constraints point to */
    m->ccache = NULL;
    lg_cvocab_free(m->cvocab);
    m->cvocab = NULL;
}
