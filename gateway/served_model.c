/*
 * served_model.c — see served_model.h.
 */
#include "gateway/served_model.h"

#include <stdio.h>
#include <stdlib.h>
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

static bool builtin_name(const char *s)
{
    return s && (!strcmp(s, "chatml") || !strcmp(s, "llama3") || !strcmp(s, "llama2") || !strcmp(s, "mistral"));
}

/* The whole file (malloc'd), or NULL with err set. */
static char *read_template(const char *path, lg_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return lg_fail(err, "--chat-template %s: cannot open the file", path), NULL;
    char *s = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n <= (8L << 20) && fseek(f, 0, SEEK_SET) == 0 &&
        (s = malloc((size_t)n + 1)) && fread(s, 1, (size_t)n, f) == (size_t)n) {
        s[n] = 0;
    } else {
        free(s);
        s = NULL;
        lg_fail(err, "--chat-template %s: cannot read the file (at most 8 MiB)", path);
    }
    fclose(f);
    return s;
}

int lg_served_model_init(lg_served_model *m, const lg_weights *w, const lg_serve_config *cfg, int max_context,
                         int64_t created_at, lg_err *err)
{
    memset(m, 0, sizeof *m);
    m->created_at = created_at;
    m->vocab_size = lg_weights_config(w)->vocab_size;
    {
        const lg_model_config *qc = lg_weights_config(w);
        snprintf(m->quantization, sizeof m->quantization, "%s", qc->quant_method[0] ? qc->quant_method : "none");
        snprintf(m->quantization_desc, sizeof m->quantization_desc, "%s", qc->quant_desc[0] ? qc->quant_desc : "none");
    }
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
        const char *bos_t = bos >= 0 ? lg_tokenizer_token_text(m->tok, bos) : NULL;
        const char *eos_t = eos >= 0 ? lg_tokenizer_token_text(m->tok, eos) : NULL;
        lg_err cerr = {{0}};
        if (cfg->chat_template && !builtin_name(cfg->chat_template)) { /* a template file: it must work */
            char *text = read_template(cfg->chat_template, err);
            if (!text)
                return -1;
            int rc = lg_chat_template_new(text, NULL, bos_t, eos_t, &m->chat, &cerr);
            m->tool_parser = lg_tc_parser_for_template(text);
            free(text);
            if (rc != 0)
                return lg_fail(err, "--chat-template %s: %s", cfg->chat_template, cerr.msg);
        } else {
            const char *text = lg_weights_chat_template(w);
            if (lg_chat_template_new(text, cfg->chat_template, bos_t, eos_t, &m->chat, &cerr) != 0)
                m->chat = NULL;
            if (!cfg->chat_template)
                m->tool_parser = lg_tc_parser_for_template(text);
        }
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
    if (cfg->tool_call_parser)
        m->tool_parser = lg_tc_parser_find(cfg->tool_call_parser); /* the option's choices are the parsers */
    return 0;
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
