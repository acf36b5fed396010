/*
 * constrain_tool.c — one constraint, driven over stdin: the test and
 * benchmark harness of engine/runtime/constrain (the Python tests of
 * tests/constrain compare its masks with llguidance's).
 *
 *   constrain_tool (--vocab FILE | --tokenizer PATH) --kind KIND [--source FILE]
 *                  [--ws compact|spaced] [--limit name=value ...]
 *
 * --vocab FILE: JSON {"tokens": [base64 of token i's bytes | null], "eos": [ids]}
 * (null: a special token, never allowed). --tokenizer PATH: a tokenizer.json
 * or a .gguf read with our tokenizer; EOS from it (a GGUF's model EOS ids).
 * KIND: json_schema | json_object | json_value | regex | lark | choice.
 * --limit: an lg_climits field, e.g. --limit max_compile_ms=100.
 *
 * On start it compiles and prints one line, `ready <n_rules> <n_states>
 * <compile_us>`, or `error <code> <param-or-dash>\t<message>` and exits 2.
 * Then one answer line per command line:
 *   mask            <count> <ranges>  (comma-separated a or a-b, "-" if none)
 *   timemask        <count> <microseconds>
 *   advance <id>    ok | err <message>
 *   bytes <hex>     ok | err <message>   (lg_cmatch_advance_bytes)
 *   accepting       1 | 0
 *   done            1 | 0
 *   forced          <hex> | -
 *   rollback <k>    ok | err <message>
 *   completion      <hex> | none          (shortest completion, cap 4096)
 *   quit            exits 0
 * Bad usage: a message on stderr, exit 1.
 */
#include "engine/model/tokenizer.h"
#include "engine/model/weights.h"
#include "engine/runtime/constrain/constrain.h"

#include <jansson.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void)
{
    fprintf(stderr, "usage: constrain_tool (--vocab FILE | --tokenizer PATH) --kind KIND [--source FILE]\n"
                    "                      [--ws compact|spaced] [--limit name=value ...]\n");
    return 1;
}

static int b64v(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* base64 -> bytes (malloc'd); -1 on bad input */
static long b64dec(const char *s, char **out)
{
    size_t n = strlen(s);
    char *o = malloc(n / 4 * 3 + 4);
    if (!o)
        return -1;
    long k = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=')
            break;
        int v = b64v((unsigned char)s[i]);
        if (v < 0) {
            free(o);
            return -1;
        }
        acc = acc << 6 | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            o[k++] = (char)(acc >> bits & 0xFF);
        }
    }
    *out = o;
    return k;
}

static int load_vocab_file(const char *path, lg_cvocab **out)
{
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc) {
        fprintf(stderr, "constrain_tool: %s: %s\n", path, je.text);
        return -1;
    }
    json_t *toks = json_object_get(doc, "tokens"), *eos = json_object_get(doc, "eos");
    if (!json_is_array(toks) || (eos && !json_is_array(eos))) {
        fprintf(stderr, "constrain_tool: %s: needs \"tokens\" (array) and \"eos\" (array)\n", path);
        json_decref(doc);
        return -1;
    }
    int n = (int)json_array_size(toks), ne = (int)json_array_size(eos);
    char **t = calloc((size_t)n + 1, sizeof *t);
    uint32_t *lens = calloc((size_t)n + 1, sizeof *lens);
    bool *special = calloc((size_t)n + 1, sizeof *special);
    int32_t *eids = calloc((size_t)ne + 1, sizeof *eids);
    int rc = -1;
    if (!t || !lens || !special || !eids)
        goto out;
    for (int i = 0; i < n; i++) {
        json_t *x = json_array_get(toks, (size_t)i);
        if (json_is_null(x)) {
            special[i] = true;
            continue;
        }
        long k = json_is_string(x) ? b64dec(json_string_value(x), &t[i]) : -1;
        if (k < 0) {
            fprintf(stderr, "constrain_tool: %s: token %d is not base64\n", path, i);
            goto out;
        }
        lens[i] = (uint32_t)k;
    }
    for (int i = 0; i < ne; i++)
        eids[i] = (int32_t)json_integer_value(json_array_get(eos, (size_t)i));
    lg_err err = {{0}};
    if (lg_cvocab_from_bytes(n, (const char *const *)t, lens, special, eids, ne, out, &err)) {
        fprintf(stderr, "constrain_tool: %s\n", err.msg);
        goto out;
    }
    rc = 0;
out:
    if (t)
        for (int i = 0; i < n; i++)
            free(t[i]);
    free(t);
    free(lens);
    free(special);
    free(eids);
    json_decref(doc);
    return rc;
}

static int load_tokenizer(const char *path, lg_cvocab **out)
{
    lg_err err = {{0}};
    size_t n = strlen(path);
    int rc = -1;
    if (n > 5 && !strcmp(path + n - 5, ".gguf")) {
        lg_load_opts o = {.vocab_only = true};
        lg_weights *w = NULL;
        if (lg_weights_load_gguf(path, &o, &w, &err)) {
            fprintf(stderr, "constrain_tool: %s\n", err.msg);
            return -1;
        }
        const lg_model_config *cfg = lg_weights_config(w);
        int32_t eos[16];
        int ne = 0;
        for (int i = 0; i < cfg->n_eos && i < 16; i++)
            eos[ne++] = cfg->eos_ids[i];
        rc = lg_cvocab_from_tokenizer(lg_weights_tokenizer(w), ne ? eos : NULL, ne, out, &err);
        lg_weights_free(w);
    } else {
        char *text = NULL;
        size_t len;
        if (lg_read_file(path, (size_t)1 << 30, &text, &len, &err)) {
            fprintf(stderr, "constrain_tool: %s\n", err.msg);
            return -1;
        }
        lg_tokenizer *t = NULL;
        if (lg_tokenizer_from_json(text, NULL, &t, &err) == 0) {
            rc = lg_cvocab_from_tokenizer(t, NULL, 0, out, &err);
            lg_tokenizer_free(t);
        }
        free(text);
    }
    if (rc)
        fprintf(stderr, "constrain_tool: %s\n", err.msg);
    return rc;
}

static int set_limit(lg_climits *l, const char *spec)
{
    const char *eq = strchr(spec, '=');
    if (!eq)
        return -1;
    size_t k = (size_t)(eq - spec);
    long long v = atoll(eq + 1);
#define F(name)                                                   \
    if (k == strlen(#name) && !strncmp(spec, #name, k)) {         \
        l->name = (__typeof__(l->name))v;                         \
        return 0;                                                 \
    }
    F(max_source_bytes) F(max_depth) F(max_ref_expansions) F(max_rules) F(max_nfa_states) F(max_dfa_states)
    F(max_compile_ms) F(max_stack) F(max_tops) F(max_frames) F(max_table_bytes)
#undef F
    return -1;
}

static void put_hex(const char *b, size_t n)
{
    if (n == 0) {
        fputs("-", stdout);
        return;
    }
    for (size_t i = 0; i < n; i++)
        printf("%02x", (unsigned char)b[i]);
}

static long hexdec(const char *s, char *out)
{
    size_t n = strlen(s);
    if (n % 2)
        return -1;
    for (size_t i = 0; i < n; i += 2) {
        int hv[2];
        for (int j = 0; j < 2; j++) {
            int c = (unsigned char)s[i + j];
            hv[j] = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
            if (hv[j] < 0)
                return -1;
        }
        out[i / 2] = (char)(hv[0] << 4 | hv[1]);
    }
    return (long)(n / 2);
}

static void print_mask(const uint32_t *mask, int n_vocab, int count)
{
    printf("%d ", count);
    bool any = false;
    for (int i = 0; i < n_vocab;) {
        if (!(mask[i >> 5] >> (i & 31) & 1)) {
            i++;
            continue;
        }
        int j = i;
        while (j + 1 < n_vocab && (mask[(j + 1) >> 5] >> ((j + 1) & 31) & 1))
            j++;
        printf(any ? "," : "");
        if (j == i)
            printf("%d", i);
        else
            printf("%d-%d", i, j);
        any = true;
        i = j + 1;
    }
    if (!any)
        fputs("-", stdout);
    putchar('\n');
}

int main(int argc, char **argv)
{
    const char *vocab_file = NULL, *tok_path = NULL, *kind = NULL, *src_path = NULL;
    lg_copts opts = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--vocab") && v)
            vocab_file = v, i++;
        else if (!strcmp(a, "--tokenizer") && v)
            tok_path = v, i++;
        else if (!strcmp(a, "--kind") && v)
            kind = v, i++;
        else if (!strcmp(a, "--source") && v)
            src_path = v, i++;
        else if (!strcmp(a, "--ws") && v) {
            if (!strcmp(v, "compact"))
                opts.whitespace = LG_CWS_COMPACT;
            else if (!strcmp(v, "spaced"))
                opts.whitespace = LG_CWS_SPACED;
            else
                return usage();
            i++;
        } else if (!strcmp(a, "--limit") && v) {
            if (set_limit(&opts.limits, v)) {
                fprintf(stderr, "constrain_tool: unknown limit '%s'\n", v);
                return 1;
            }
            i++;
        } else
            return usage();
    }
    if (!kind || (!vocab_file == !tok_path))
        return usage();
    static const char *const kinds[] = {"json_schema", "json_object", "json_value", "regex", "lark", "choice"};
    int k = -1;
    for (int i = 0; i < 6; i++)
        if (!strcmp(kind, kinds[i]))
            k = i;
    if (k < 0)
        return usage();
    opts.kind = (lg_ckind)k;
    char *src = NULL;
    size_t len = 0;
    if (src_path) {
        lg_err err = {{0}};
        if (lg_read_file(src_path, (size_t)1 << 30, &src, &len, &err)) {
            fprintf(stderr, "constrain_tool: %s\n", err.msg);
            return 1;
        }
    }
    lg_cvocab *v = NULL;
    if (vocab_file ? load_vocab_file(vocab_file, &v) : load_tokenizer(tok_path, &v)) {
        free(src);
        return 1;
    }
    /* the vocabulary file's JSON tree was just freed: consolidate the heap now so
     * that the first large allocation of the compilation does not pay for it */
    malloc_trim(0);
    lg_constraint *c = NULL;
    lg_cerr cerr;
    double t0 = lg_now();
    if (lg_constraint_compile(v, &opts, src ? src : "", len, &c, &cerr)) {
        printf("error %d %s\t%s\n", cerr.code, cerr.param[0] ? cerr.param : "-", cerr.msg);
        fflush(stdout);
        free(src);
        lg_cvocab_free(v);
        return 2;
    }
    long us = (long)((lg_now() - t0) * 1e6);
    lg_cstats st;
    lg_constraint_stats(c, &st);
    printf("ready %d %d %ld\n", st.n_rules, st.n_states, us);
    fflush(stdout);
    lg_cmatch *m = lg_cmatch_new(c);
    int nw = lg_cvocab_mask_words(v), nv = lg_cvocab_n_vocab(v);
    uint32_t *mask = calloc((size_t)nw, sizeof *mask);
    char *buf = malloc(1 << 16);
    size_t cap = 1 << 20;
    char *line = malloc(cap), *bytes = malloc(cap / 2 + 1);
    int rc = 0;
    if (!m || !mask || !buf || !line || !bytes) {
        fprintf(stderr, "constrain_tool: out of memory\n");
        rc = 1;
        goto out;
    }
    while (fgets(line, (int)cap, stdin)) {
        size_t n = strlen(line);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        char *arg = strchr(line, ' ');
        if (arg)
            *arg++ = 0;
        lg_err err = {{0}};
        if (!strcmp(line, "mask") || !strcmp(line, "timemask")) {
            double s = lg_now();
            int cnt = lg_cmatch_mask(m, mask, nw, &err);
            double e = lg_now();
            if (cnt < 0)
                printf("err %s\n", err.msg);
            else if (line[0] == 't')
                printf("%d %ld\n", cnt, (long)((e - s) * 1e6 + 0.5));
            else
                print_mask(mask, nv, cnt);
        } else if (!strcmp(line, "advance") && arg) {
            if (lg_cmatch_advance(m, (int32_t)atol(arg), &err))
                printf("err %s\n", err.msg);
            else
                puts("ok");
        } else if (!strcmp(line, "bytes")) {
            long nb = hexdec(arg ? arg : "", bytes);
            if (nb < 0)
                puts("err bad hex");
            else if (lg_cmatch_advance_bytes(m, bytes, (size_t)nb, &err))
                printf("err %s\n", err.msg);
            else
                puts("ok");
        } else if (!strcmp(line, "accepting"))
            puts(lg_cmatch_is_accepting(m) ? "1" : "0");
        else if (!strcmp(line, "done"))
            puts(lg_cmatch_is_done(m) ? "1" : "0");
        else if (!strcmp(line, "forced")) {
            size_t fb = lg_cmatch_forced_bytes(m, buf, 4096);
            put_hex(buf, fb);
            putchar('\n');
        } else if (!strcmp(line, "rollback") && arg) {
            if (lg_cmatch_rollback(m, atoi(arg)))
                printf("err cannot roll back %s steps (history %d)\n", arg, lg_cmatch_history(m));
            else
                puts("ok");
        } else if (!strcmp(line, "completion")) {
            long cl = lg_cmatch_shortest_completion(m, buf, 4096);
            if (cl < 0)
                puts("none");
            else {
                for (long i = 0; i < cl; i++) /* empty line: already complete */
                    printf("%02x", (unsigned char)buf[i]);
                putchar('\n');
            }
        } else if (!strcmp(line, "quit"))
            break;
        else
            printf("err unknown command '%s'\n", line);
        fflush(stdout);
    }
out:
    free(mask);
    free(buf);
    free(line);
    free(bytes);
    lg_cmatch_free(m);
    lg_constraint_unref(c);
    lg_cvocab_free(v);
    free(src);
    return rc;
}
