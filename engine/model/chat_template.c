/*
 * chat_template.c — recognise a model's Jinja chat template and render it in C.
 *
 * We never evaluate Jinja. lg_chat_template_new() looks for distinctive
 * markers in the template text, decides the family and a handful of variant
 * flags, and pulls out the few literals that differ between models (a default
 * system prompt, Llama-3.1's date). lg_chat_template_apply() then renders the
 * messages the way that template would under HF transformers (jinja2 with
 * trim_blocks/lstrip_blocks, add_generation_prompt=True), byte for byte.
 * tests/chat/test_templates.py checks that against the real template texts
 * saved in tests/chat/templates/.
 *
 * Families and the variants we know (see tests/chat/templates/SOURCES.md):
 *   ChatML   every message "<|im_start|>ROLE\nCONTENT<|im_end|>\n"; an optional
 *            default system message when messages[0] is not "system"
 *            (SmolLM2, Qwen2, Qwen2.5); no role checks.
 *   Llama-3  "<|start_header_id|>ROLE<|end_header_id|>\n\n" + trim(CONTENT) +
 *            "<|eot_id|>"; plain 3.0 writes BOS before the first message; 3.1+
 *            always writes a system block with "Cutting Knowledge Date" and
 *            "Today Date", holding trim(messages[0]) when it is a system message.
 *   [INST]   Llama-2 (<<SYS>> folded into the first user turn, content strip()ed,
 *            BOS before every user turn) and Mistral (no system slot: either the
 *            template raises on a system message, or, in the later "v1" text,
 *            the system text is prepended to the first user turn). Roles must
 *            alternate user/assistant after the optional system message; where
 *            the real template raises, we return an error.
 *
 * Only the roles system/user/assistant are accepted (tool roles are not
 * rendered by us). trim/strip follow Python's str.strip(): Unicode whitespace.
 * Workload: one render per request; texts are short, so clarity wins over speed.
 */
#include "engine/model/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define LG_CT_UNRECOGNISED "unrecognised chat template; pass --chat-template chatml|llama3|llama2|mistral"

typedef enum lg_inst_kind {
    LG_INST_LLAMA2 = 0,   /* <<SYS>> folded into the first user turn */
    LG_INST_MISTRAL_RAISE, /* system message -> error (Mistral v0.1 original) */
    LG_INST_MISTRAL_MERGE, /* system text + "\n\n" prepended to first user turn */
} lg_inst_kind;

struct lg_chat_template {
    lg_chat_family family;
    char *bos; /* text written where the template writes bos_token (or '<s>') */
    char *eos;
    char *default_system; /* ChatML / Llama-2: used when messages[0] is not system; may be NULL */

    /* Llama-3 */
    bool l3_sys_block;     /* 3.1+: system block with dates always present */
    char *l3_cutoff;       /* "December 2023" */
    char *l3_date;         /* "26 Jul 2024"; NULL => today's date (strftime_now) */

    /* [INST] */
    lg_inst_kind inst;
    bool bos_per_user;     /* bos before every [INST] (Llama-2) vs once at start */
    bool inst_lead_space;  /* " [INST] " (Mistral v1) vs "[INST] " */
    bool l2_sys_trim;      /* Llama-2: system text trimmed before folding */
    bool l2_sys_branch;    /* Llama-2: a later system message renders as <<SYS>> block */
    bool l2_default_needs_no_sys_marker; /* default system only if '<<SYS>>' not in messages[0] */
    bool inst_strip;       /* Llama-2: content.strip() */
    const char *asst_prefix; /* text before assistant content: " " or "" */
    const char *asst_suffix; /* text after eos: " " or "" */
    bool asst_space_before_eos; /* Llama-2: ' ' + content + ' ' + eos */
};

/* ---- Python str.strip() ---------------------------------------------------- */

/* Decodes one UTF-8 code point at s[0..n); returns its length (1 on bad bytes). */
static int utf8_dec(const unsigned char *s, size_t n, uint32_t *cp)
{
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    int len = (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 1;
    if (len == 1 || (size_t)len > n) { *cp = 0xfffd; return 1; }
    uint32_t c = s[0] & (0x7f >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80) { *cp = 0xfffd; return 1; }
        c = (c << 6) | (s[i] & 0x3f);
    }
    *cp = c;
    return len;
}

/* Python's str.isspace() set. */
static bool py_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Appends s with Python whitespace stripped from both ends. */
static void sb_put_stripped(lg_strbuf *b, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), i = 0, end = 0;
    /* leading */
    while (i < n) {
        uint32_t c;
        int l = utf8_dec(u + i, n - i, &c);
        if (!py_space(c))
            break;
        i += (size_t)l;
    }
    /* trailing: scan forward, remember end of last non-space code point */
    end = i;
    for (size_t j = i; j < n;) {
        uint32_t c;
        int l = utf8_dec(u + j, n - j, &c);
        j += (size_t)l;
        if (!py_space(c))
            end = j;
    }
    lg_strbuf_put(b, s + i, end - i);
}

/* ---- reading literals out of the template text ------------------------------ */

/* Decodes a Jinja (Python-like) string literal body s[0..n) with escapes. */
static char *decode_literal(const char *s, size_t n)
{
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) {
            char c = s[++i];
            switch (c) {
            case 'n': *o++ = '\n'; break;
            case 't': *o++ = '\t'; break;
            case 'r': *o++ = '\r'; break;
            default: *o++ = c; break; /* \\ \' \" */
            }
        } else {
            *o++ = s[i];
        }
    }
    *o = 0;
    return out;
}

/* Finds the string literal that contains `after` immediately following `head`
 * (e.g. head "<|im_start|>system", after "\n") and ends at `tail`, with no quote
 * of its own kind between. Returns the decoded text between head+newline and
 * tail, or NULL if no such literal exists. */
static char *find_literal_between(const char *t, const char *head, const char *tail)
{
    size_t hl = strlen(head);
    for (const char *p = strstr(t, head); p; p = strstr(p + 1, head)) {
        if (p == t)
            continue;
        char q = p[-1];
        if (q != '\'' && q != '"')
            continue;
        const char *s = p + hl;
        if (s[0] == '\n') s += 1;
        else if (s[0] == '\\' && s[1] == 'n') s += 2;
        else continue;
        /* scan to tail inside the same literal */
        const char *e = s;
        bool ok = false;
        while (*e) {
            if (*e == '\\' && e[1]) { e += 2; continue; }
            if (*e == q) break;
            if (!strncmp(e, tail, strlen(tail))) { ok = true; break; }
            e++;
        }
        if (ok)
            return decode_literal(s, (size_t)(e - s));
    }
    return NULL;
}

/* Finds `key` (e.g. "set date_string = ") followed by a quoted literal that is
 * the whole right-hand side; returns its decoded body or NULL. */
static char *find_assigned_literal(const char *t, const char *key)
{
    for (const char *p = strstr(t, key); p; p = strstr(p + 1, key)) {
        const char *s = p + strlen(key);
        char q = *s;
        if (q != '\'' && q != '"')
            continue;
        const char *e = ++s;
        while (*e && *e != q) {
            if (*e == '\\' && e[1]) e++;
            e++;
        }
        if (*e != q)
            return NULL;
        /* only a whole-literal assignment: `set x = '...' %}` */
        const char *after = e + 1;
        while (*after == ' ')
            after++;
        if (strncmp(after, "%}", 2) && strncmp(after, "-%}", 3))
            continue;
        return decode_literal(s, (size_t)(e - s));
    }
    return NULL;
}

static bool has(const char *t, const char *s) { return strstr(t, s) != NULL; }

/* ---- recognition ---------------------------------------------------------- */

static char *dup_or(const char *s, const char *dflt)
{
    const char *v = s ? s : dflt;
    return v ? strdup(v) : NULL;
}

const char *lg_chat_family_name(lg_chat_family f)
{
    switch (f) {
    case LG_CHAT_CHATML: return "chatml";
    case LG_CHAT_LLAMA3: return "llama3";
    case LG_CHAT_LLAMA2: return "llama2";
    }
    return "?";
}

static int setup_builtin(lg_chat_template *t, const char *name, lg_err *err)
{
    if (!strcmp(name, "chatml")) {
        t->family = LG_CHAT_CHATML;
    } else if (!strcmp(name, "llama3")) {
        t->family = LG_CHAT_LLAMA3; /* the plain Llama-3.0 form */
    } else if (!strcmp(name, "llama2")) {
        t->family = LG_CHAT_LLAMA2; /* transformers' Llama-2 template */
        t->inst = LG_INST_LLAMA2;
        t->bos_per_user = true;
        t->l2_sys_branch = true;
        t->inst_strip = true;
        t->asst_prefix = " ";
        t->asst_space_before_eos = true;
    } else if (!strcmp(name, "mistral")) {
        t->family = LG_CHAT_LLAMA2; /* Mistral "v1" text: system merged into first turn */
        t->inst = LG_INST_MISTRAL_MERGE;
        t->inst_lead_space = true;
        t->asst_prefix = " ";
    } else {
        return lg_fail(err, "unknown built-in chat template '%s'; expected chatml|llama3|llama2|mistral", name);
    }
    return 0;
}

static int recognise_inst(lg_chat_template *t, const char *j, lg_err *err)
{
    t->family = LG_CHAT_LLAMA2;
    t->bos_per_user = has(j, "bos_token + '[INST]") || has(j, "'<s>' + '[INST]");
    if (has(j, "'<s>'")) { free(t->bos); t->bos = strdup("<s>"); }
    if (has(j, "'</s>'")) { free(t->eos); t->eos = strdup("</s>"); }
    if (has(j, "<<SYS>>")) {
        t->inst = LG_INST_LLAMA2;
        t->inst_strip = has(j, "content.strip()") || has(j, "content | trim") || has(j, "content|trim");
        t->l2_sys_trim = has(j, "messages[0]['content'] | trim") || has(j, "messages[0]['content']|trim");
        t->l2_sys_branch = has(j, "elif message['role'] == 'system'");
        t->asst_prefix = " ";
        t->asst_space_before_eos = has(j, "' ' + eos_token") || has(j, "' ' + '</s>'");
        /* A default system prompt guarded by a constant (transformers'
         * USE_DEFAULT_PROMPT, substituted as "true"/"false"). */
        char *dflt = find_assigned_literal(j, "set system_message = ");
        if (dflt && !*dflt) { /* '' means "none" (the text is prepended as is) */
            free(dflt);
            dflt = NULL;
        }
        if (dflt) {
            if (has(j, "elif true == true and not '<<SYS>>' in messages[0]['content']")) {
                t->default_system = dflt;
                t->l2_default_needs_no_sys_marker = true;
            } else if (has(j, "elif false == true")) {
                free(dflt);
            } else {
                free(dflt);
                return lg_fail(err, "Llama-2 chat template with an unknown default-system rule; " LG_CT_UNRECOGNISED);
            }
        }
        if (!t->inst_strip)
            return lg_fail(err, "Llama-2 chat template variant not known (no strip of content); " LG_CT_UNRECOGNISED);
        return 0;
    }
    /* Mistral */
    if (has(j, "system_message") && (has(j, "system_message + '\\n\\n'") || has(j, "system_message + '\n\n'"))) {
        t->inst = LG_INST_MISTRAL_MERGE;
        t->inst_lead_space = has(j, "' [INST] '");
        t->asst_prefix = has(j, "' ' + message['content']") ? " " : "";
        return 0;
    }
    if (has(j, "raise_exception('Only user and assistant roles are supported!')")) {
        t->inst = LG_INST_MISTRAL_RAISE;
        t->asst_prefix = "";
        t->asst_suffix = has(j, "eos_token + ' '") ? " " : "";
        return 0;
    }
    return lg_fail(err, "[INST] chat template variant not known; " LG_CT_UNRECOGNISED);
}

static int recognise(lg_chat_template *t, const char *j, lg_err *err)
{
    if (has(j, "<|im_start|>")) {
        /* ChatML relatives that render differently (phi-4's <|im_sep|>, Qwen3's
         * reasoning blocks) are not plain ChatML. */
        if (!has(j, "<|im_end|>") || has(j, "<|im_sep|>") || has(j, "<think>") || has(j, "reasoning_content"))
            return lg_fail(err, LG_CT_UNRECOGNISED);
        t->family = LG_CHAT_CHATML;
        /* The injected default is a literal "<|im_start|>system\n...<|im_end|>";
         * the system-from-messages writes go through `+ message ... +` and are
         * skipped because the literal closes before <|im_end|>. */
        t->default_system = find_literal_between(j, "<|im_start|>system", "<|im_end|>");
        return 0;
    }
    if (has(j, "<|start_header_id|>") && has(j, "<|eot_id|>")) {
        t->family = LG_CHAT_LLAMA3;
        if (has(j, "Cutting Knowledge Date: ")) {
            t->l3_sys_block = true;
            const char *p = strstr(j, "Cutting Knowledge Date: ") + strlen("Cutting Knowledge Date: ");
            const char *e = p;
            while (*e && *e != '\\' && *e != '\n' && *e != '"' && *e != '\'')
                e++;
            t->l3_cutoff = decode_literal(p, (size_t)(e - p));
            if (has(j, "strftime_now"))
                t->l3_date = NULL; /* transformers passes strftime_now: today's date */
            else if (!(t->l3_date = find_assigned_literal(j, "set date_string = ")))
                return lg_fail(err, "Llama-3.1 chat template without a date_string literal; " LG_CT_UNRECOGNISED);
        }
        return 0;
    }
    if (has(j, "[INST]"))
        return recognise_inst(t, j, err);
    return lg_fail(err, LG_CT_UNRECOGNISED);
}

int lg_chat_template_new(const char *jinja_text, const char *builtin_name, const char *bos_text,
                         const char *eos_text, lg_chat_template **out, lg_err *err)
{
    *out = NULL;
    lg_chat_template *t = calloc(1, sizeof *t);
    if (!t)
        return lg_fail(err, "out of memory");
    t->asst_prefix = "";
    t->asst_suffix = "";
    int rc;
    if (builtin_name && *builtin_name)
        rc = setup_builtin(t, builtin_name, err);
    else if (jinja_text && *jinja_text)
        rc = recognise(t, jinja_text, err);
    else
        rc = lg_fail(err, "model has no chat template; pass --chat-template chatml|llama3|llama2|mistral");
    if (rc != 0) {
        lg_chat_template_free(t);
        return -1;
    }
    const char *dbos = t->family == LG_CHAT_LLAMA3 ? "<|begin_of_text|>" : t->family == LG_CHAT_LLAMA2 ? "<s>" : "";
    const char *deos = t->family == LG_CHAT_LLAMA3 ? "<|eot_id|>" : t->family == LG_CHAT_LLAMA2 ? "</s>" : "";
    if (!t->bos) t->bos = dup_or(bos_text, dbos);
    if (!t->eos) t->eos = dup_or(eos_text, deos);
    if (t->family == LG_CHAT_LLAMA3 && t->l3_sys_block && !t->l3_cutoff)
        t->l3_cutoff = strdup("December 2023");
    if (!t->bos || !t->eos) {
        lg_chat_template_free(t);
        return lg_fail(err, "out of memory");
    }
    *out = t;
    return 0;
}

void lg_chat_template_free(lg_chat_template *t)
{
    if (!t)
        return;
    free(t->bos);
    free(t->eos);
    free(t->default_system);
    free(t->l3_cutoff);
    free(t->l3_date);
    free(t);
}

lg_chat_family lg_chat_template_family(const lg_chat_template *t) { return t->family; }

/* ---- rendering ------------------------------------------------------------- */

static bool is_role(const lg_chat_msg *m, const char *r) { return !strcmp(m->role, r); }

static void render_chatml(const lg_chat_template *t, const lg_chat_msg *m, int n, lg_strbuf *b)
{
    if (t->default_system && !is_role(&m[0], "system")) {
        lg_strbuf_puts(b, "<|im_start|>system\n");
        lg_strbuf_puts(b, t->default_system);
        lg_strbuf_puts(b, "<|im_end|>\n");
    }
    for (int i = 0; i < n; i++) {
        lg_strbuf_puts(b, "<|im_start|>");
        lg_strbuf_puts(b, m[i].role);
        lg_strbuf_puts(b, "\n");
        lg_strbuf_puts(b, m[i].content);
        lg_strbuf_puts(b, "<|im_end|>\n");
    }
    lg_strbuf_puts(b, "<|im_start|>assistant\n");
}

static void l3_header(lg_strbuf *b, const char *role)
{
    lg_strbuf_puts(b, "<|start_header_id|>");
    lg_strbuf_puts(b, role);
    lg_strbuf_puts(b, "<|end_header_id|>\n\n");
}

static void render_llama3(const lg_chat_template *t, const lg_chat_msg *m, int n, lg_strbuf *b)
{
    int i = 0;
    if (t->l3_sys_block) {
        lg_strbuf_puts(b, t->bos);
        l3_header(b, "system");
        lg_strbuf_puts(b, "Cutting Knowledge Date: ");
        lg_strbuf_puts(b, t->l3_cutoff);
        lg_strbuf_puts(b, "\nToday Date: ");
        if (t->l3_date) {
            lg_strbuf_puts(b, t->l3_date);
        } else {
            char d[64];
            time_t now = time(NULL);
            struct tm tm;
            localtime_r(&now, &tm);
            strftime(d, sizeof d, "%d %b %Y", &tm);
            lg_strbuf_puts(b, d);
        }
        lg_strbuf_puts(b, "\n\n");
        if (n > 0 && is_role(&m[0], "system")) {
            sb_put_stripped(b, m[0].content);
            i = 1;
        }
        lg_strbuf_puts(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        if (i == 0 && !t->l3_sys_block)
            lg_strbuf_puts(b, t->bos);
        l3_header(b, m[i].role);
        sb_put_stripped(b, m[i].content);
        lg_strbuf_puts(b, "<|eot_id|>");
    }
    l3_header(b, "assistant");
}

#define LG_ALTERNATE_MSG "Conversation roles must alternate user/assistant/user/assistant/..."

static int render_inst(const lg_chat_template *t, const lg_chat_msg *m, int n, lg_strbuf *b, lg_err *err)
{
    const char *sys = NULL;
    int first = 0;
    if (t->inst != LG_INST_MISTRAL_RAISE && is_role(&m[0], "system")) {
        sys = m[0].content;
        first = 1;
    } else if (t->inst == LG_INST_LLAMA2 && t->default_system &&
               !(t->l2_default_needs_no_sys_marker && strstr(m[0].content, "<<SYS>>"))) {
        sys = t->default_system;
    }
    if (!t->bos_per_user)
        lg_strbuf_puts(b, t->bos);
    for (int i = first; i < n; i++) {
        int k = i - first; /* loop.index0 */
        bool user = is_role(&m[i], "user");
        if (user != (k % 2 == 0)) {
            if (t->inst == LG_INST_MISTRAL_MERGE)
                return lg_fail(err, "After the optional system message, conversation roles must alternate "
                                    "user/assistant/user/assistant/...");
            return lg_fail(err, LG_ALTERNATE_MSG);
        }
        if (t->inst == LG_INST_LLAMA2) {
            /* content = (k == 0 && sys) ? "<<SYS>>\n" + sys + "\n<</SYS>>\n\n" + content : content */
            lg_strbuf c = {0};
            if (k == 0 && sys) {
                lg_strbuf_puts(&c, "<<SYS>>\n");
                if (t->l2_sys_trim) sb_put_stripped(&c, sys);
                else lg_strbuf_puts(&c, sys);
                lg_strbuf_puts(&c, "\n<</SYS>>\n\n");
            }
            lg_strbuf_puts(&c, m[i].content);
            const char *cs = c.p ? c.p : "";
            if (user) {
                if (t->bos_per_user)
                    lg_strbuf_puts(b, t->bos);
                lg_strbuf_puts(b, "[INST] ");
                sb_put_stripped(b, cs);
                lg_strbuf_puts(b, " [/INST]");
            } else if (is_role(&m[i], "assistant")) {
                lg_strbuf_puts(b, " ");
                sb_put_stripped(b, cs);
                if (t->asst_space_before_eos)
                    lg_strbuf_puts(b, " ");
                lg_strbuf_puts(b, t->eos);
            } else if (is_role(&m[i], "system") && t->l2_sys_branch) {
                lg_strbuf_puts(b, "<<SYS>>\n");
                sb_put_stripped(b, cs);
                lg_strbuf_puts(b, "\n<</SYS>>\n\n");
            } /* else: the template writes nothing for it */
            bool oom = c.oom;
            free(c.p);
            if (oom)
                b->oom = true;
            continue;
        }
        /* Mistral */
        if (user) {
            lg_strbuf_puts(b, t->inst_lead_space ? " [INST] " : "[INST] ");
            if (k == 0 && sys) {
                lg_strbuf_puts(b, sys);
                lg_strbuf_puts(b, "\n\n");
            }
            lg_strbuf_puts(b, m[i].content);
            lg_strbuf_puts(b, " [/INST]");
        } else if (is_role(&m[i], "assistant")) {
            lg_strbuf_puts(b, t->asst_prefix);
            lg_strbuf_puts(b, m[i].content);
            lg_strbuf_puts(b, t->eos);
            lg_strbuf_puts(b, t->asst_suffix);
        } else if (t->inst == LG_INST_MISTRAL_RAISE) {
            return lg_fail(err, "Only user and assistant roles are supported!");
        } else {
            return lg_fail(err, "Only user and assistant roles are supported, with the exception of an "
                                "initial optional system message!");
        }
    }
    return 0;
}

int lg_chat_template_apply(const lg_chat_template *t, const lg_chat_msg *msgs, int n_msgs, char **out,
                           lg_err *err)
{
    *out = NULL;
    if (n_msgs <= 0)
        return lg_fail(err, "chat template: no messages");
    for (int i = 0; i < n_msgs; i++) {
        const char *r = msgs[i].role;
        if (!r || !msgs[i].content)
            return lg_fail(err, "chat template: message %d has no %s", i, r ? "content" : "role");
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
            return lg_fail(err, "chat template: message %d has role '%s'; expected system, user or assistant", i, r);
    }
    lg_strbuf b = {0};
    int rc = 0;
    switch (t->family) {
    case LG_CHAT_CHATML: render_chatml(t, msgs, n_msgs, &b); break;
    case LG_CHAT_LLAMA3: render_llama3(t, msgs, n_msgs, &b); break;
    case LG_CHAT_LLAMA2: rc = render_inst(t, msgs, n_msgs, &b, err); break;
    }
    if (rc == 0 && b.oom)
        rc = lg_fail(err, "out of memory rendering chat template");
    if (rc != 0) {
        free(b.p);
        return -1;
    }
    *out = b.p ? b.p : strdup("");
    if (!*out)
        return lg_fail(err, "out of memory rendering chat template");
    return 0;
}
