/*
 * chat_template.c — a model's chat template: its own Jinja text run by the
 * interpreter (jinja.h), or a built-in family as the fallback.
 *
 * The Jinja path (lg_chat_template_render) prepares the conversation as
 * vLLM and transformers do before rendering (see chat_template.h): null
 * keys dropped, tool-call arguments parsed from JSON strings, content parts
 * joined unless the template loops over content, reasoning fields aliased;
 * then the template sees messages, tools, documents, add_generation_prompt,
 * bos_token, eos_token and the caller's kwargs.
 *
 * The built-in families render without Jinja, byte for byte as the real
 * templates they stand for (tests/chat/test_templates.py checks them
 * against those texts):
 *   ChatML   every message "<|im_start|>ROLE\nCONTENT<|im_end|>\n".
 *   Llama-3  "<|start_header_id|>ROLE<|end_header_id|>\n\n" + trim(CONTENT) +
 *            "<|eot_id|>", BOS before the first message.
 *   [INST]   Llama-2 (<<SYS>> folded into the first user turn, content strip()ed,
 *            BOS before every user turn) and Mistral (the system text is
 *            prepended to the first user turn). Roles must alternate
 *            user/assistant after the optional system message.
 * Only the roles system/user/assistant are accepted by the built-ins.
 * trim/strip follow Python's str.strip(): Unicode whitespace.
 * Workload: one render per request; texts are short, so clarity wins over speed.
 */
#include "engine/model/chat_template.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine/model/jinja.h"

typedef enum lg_inst_kind {
    LG_INST_LLAMA2 = 0,   /* <<SYS>> folded into the first user turn */
    LG_INST_MISTRAL_RAISE, /* system message -> error (Mistral v0.1 original) */
    LG_INST_MISTRAL_MERGE, /* system text + "\n\n" prepended to first user turn */
} lg_inst_kind;

struct lg_chat_template {
    lg_chat_family family;
    lg_jinja *jinja; /* LG_CHAT_JINJA: the model's template */
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

/* ---- construction ---------------------------------------------------------- */

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
    case LG_CHAT_JINJA: return "jinja";
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
    if (builtin_name && *builtin_name) {
        rc = setup_builtin(t, builtin_name, err);
    } else if (jinja_text && *jinja_text) {
        t->family = LG_CHAT_JINJA;
        rc = lg_jinja_parse(jinja_text, strlen(jinja_text), &t->jinja, err);
    } else {
        rc = lg_fail(err, "model has no chat template; pass --chat-template chatml|llama3|llama2|mistral or a template file");
    }
    if (rc != 0) {
        lg_chat_template_free(t);
        return -1;
    }
    const char *dbos = t->family == LG_CHAT_LLAMA3 ? "<|begin_of_text|>" : t->family == LG_CHAT_LLAMA2 ? "<s>" : "";
    const char *deos = t->family == LG_CHAT_LLAMA3 ? "<|eot_id|>" : t->family == LG_CHAT_LLAMA2 ? "</s>" : "";
    /* a Jinja template sees bos_token/eos_token only where the model has them */
    t->bos = t->family == LG_CHAT_JINJA ? (bos_text ? strdup(bos_text) : NULL) : dup_or(bos_text, dbos);
    t->eos = t->family == LG_CHAT_JINJA ? (eos_text ? strdup(eos_text) : NULL) : dup_or(eos_text, deos);
    if ((!t->bos && (bos_text || t->family != LG_CHAT_JINJA)) || (!t->eos && (eos_text || t->family != LG_CHAT_JINJA))) {
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
    lg_jinja_free(t->jinja);
    free(t);
}

lg_chat_family lg_chat_template_family(const lg_chat_template *t) { return t->family; }

/* ---- rendering ------------------------------------------------------------- */

static bool is_role(const lg_chat_msg *m, const char *r) { return !strcmp(m->role, r); }

static void render_chatml(const lg_chat_template *t, const lg_chat_msg *m, int n, bool agp, lg_strbuf *b)
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
    if (agp)
        lg_strbuf_puts(b, "<|im_start|>assistant\n");
}

static void l3_header(lg_strbuf *b, const char *role)
{
    lg_strbuf_puts(b, "<|start_header_id|>");
    lg_strbuf_puts(b, role);
    lg_strbuf_puts(b, "<|end_header_id|>\n\n");
}

static void render_llama3(const lg_chat_template *t, const lg_chat_msg *m, int n, bool agp, lg_strbuf *b)
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
    if (agp)
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

static int builtin_apply(const lg_chat_template *t, const lg_chat_msg *msgs, int n_msgs, bool agp, char **out,
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
    case LG_CHAT_CHATML: render_chatml(t, msgs, n_msgs, agp, &b); break;
    case LG_CHAT_LLAMA3: render_llama3(t, msgs, n_msgs, agp, &b); break;
    case LG_CHAT_LLAMA2: rc = render_inst(t, msgs, n_msgs, &b, err); break;
    case LG_CHAT_JINJA: rc = lg_fail(err, "chat template: not a built-in"); break;
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

/* ---- preparing an OpenAI conversation --------------------------------------- */

/* The text parts of a content list joined with "\n" (vLLM's "string" content
 * format); a non-text part is an error. Returns a new JSON string. */
static json_t *join_text_parts(const json_t *parts, size_t mi, lg_err *err)
{
    lg_strbuf b = {0};
    for (size_t k = 0; k < json_array_size(parts); k++) {
        const json_t *p = json_array_get(parts, k);
        const json_t *ty = json_object_get(p, "type"), *tx = json_object_get(p, "text");
        if (!json_is_object(p) || (ty && !json_is_string(ty)) ||
            (ty && strcmp(json_string_value(ty), "text") && strcmp(json_string_value(ty), "input_text")) ||
            !json_is_string(tx)) {
            free(b.p);
            lg_fail(err, "chat template: messages[%zu].content[%zu] is not a text part", mi, k);
            return NULL;
        }
        if (k)
            lg_strbuf_puts(&b, "\n");
        lg_strbuf_put(&b, json_string_value(tx), json_string_length(tx));
    }
    json_t *s = b.oom ? NULL : json_stringn(b.p ? b.p : "", b.p ? b.len : 0);
    free(b.p);
    if (!s)
        lg_fail(err, "out of memory");
    return s;
}

/* messages as the template sees them (a new array). */
static json_t *prepare_messages(const lg_chat_template *t, const json_t *messages, lg_err *err)
{
    if (!json_is_array(messages) || json_array_size(messages) == 0) {
        lg_fail(err, "chat template: messages must be a non-empty array");
        return NULL;
    }
    bool keep_parts = t->jinja && lg_jinja_iterates_content(t->jinja);
    json_t *out = json_array();
    for (size_t i = 0; out && i < json_array_size(messages); i++) {
        const json_t *m = json_array_get(messages, i);
        if (!json_is_object(m)) {
            lg_fail(err, "chat template: messages[%zu] is not an object", i);
            json_decref(out);
            return NULL;
        }
        json_t *c = json_object();
        const char *k;
        json_t *v;
        /* transformers: the reasoning under any of its names, `thinking` first */
        const char *const rnames[] = {"reasoning_content", "thinking", "reasoning"};
        json_t *reasoning = NULL;
        for (int r = 0; r < 3 && !reasoning; r++) {
            json_t *x = json_object_get(m, rnames[r]);
            if (x && !json_is_null(x))
                reasoning = x;
        }
        if (reasoning && !json_object_get(m, "thinking"))
            json_object_set(c, "thinking", reasoning);
        json_object_foreach((json_t *)m, k, v) {
            if (json_is_null(v))
                continue; /* transformers drops keys whose value is None */
            if (!strcmp(k, "content") && json_is_array(v) && !keep_parts) {
                json_t *s = join_text_parts(v, i, err);
                if (!s) {
                    json_decref(c);
                    json_decref(out);
                    return NULL;
                }
                json_object_set_new(c, k, s);
            } else if (!strcmp(k, "tool_calls") && json_is_array(v)) {
                json_t *calls = json_deep_copy(v);
                for (size_t j = 0; calls && j < json_array_size(calls); j++) {
                    json_t *fn = json_object_get(json_array_get(calls, j), "function");
                    json_t *args = json_object_get(fn, "arguments");
                    if (!json_is_string(args))
                        continue;
                    json_error_t je;
                    json_t *parsed = json_loadb(json_string_value(args), json_string_length(args),
                                                JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
                    if (!parsed) {
                        lg_fail(err, "chat template: messages[%zu].tool_calls[%zu].function.arguments is not valid JSON: %s",
                                i, j, je.text);
                        json_decref(calls);
                        json_decref(c);
                        json_decref(out);
                        return NULL;
                    }
                    json_object_set_new(fn, "arguments", parsed);
                }
                json_object_set_new(c, k, calls);
            } else {
                json_object_set(c, k, v);
            }
        }
        if (reasoning)
            json_object_set(c, "reasoning_content", reasoning);
        /* vLLM: a null or missing content reaches the template as "" */
        if (!json_object_get(c, "content"))
            json_object_set_new(c, "content", json_string(""));
        if (json_array_append_new(out, c) != 0) {
            json_decref(out);
            out = NULL;
        }
    }
    if (!out)
        lg_fail(err, "out of memory");
    return out;
}

/* The built-ins see role/content text only. */
static int builtin_render(const lg_chat_template *t, const json_t *messages, const json_t *tools, bool agp,
                          char **out, lg_err *err)
{
    if (json_array_size(tools) > 0)
        return lg_fail(err, "the built-in chat template '%s' does not render tools", lg_chat_family_name(t->family));
    json_t *pm = prepare_messages(t, messages, err);
    if (!pm)
        return -1;
    size_t n = json_array_size(pm);
    lg_chat_msg *msgs = calloc(n, sizeof *msgs);
    if (!msgs) {
        json_decref(pm);
        return lg_fail(err, "out of memory");
    }
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const json_t *m = json_array_get(pm, i);
        const json_t *r = json_object_get(m, "role"), *c = json_object_get(m, "content");
        msgs[i].role = json_string_value(r);
        msgs[i].content = json_string_value(c);
        if (!msgs[i].role || !msgs[i].content)
            rc = lg_fail(err, "chat template: message %zu needs a string role and content", i);
    }
    if (rc == 0)
        rc = builtin_apply(t, msgs, (int)n, agp, out, err);
    free(msgs);
    json_decref(pm);
    return rc;
}

int lg_chat_template_render(const lg_chat_template *t, const json_t *messages, const json_t *tools,
                            const json_t *documents, const json_t *kwargs, bool add_generation_prompt,
                            char **out, lg_err *err)
{
    *out = NULL;
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return lg_fail(err, "chat template: tools must be an array");
    if (documents && !json_is_array(documents) && !json_is_null(documents))
        return lg_fail(err, "chat template: documents must be an array");
    if (kwargs && !json_is_object(kwargs) && !json_is_null(kwargs))
        return lg_fail(err, "chat template: chat_template_kwargs must be an object");
    if (t->family != LG_CHAT_JINJA)
        return builtin_render(t, messages, tools, add_generation_prompt, out, err);
    json_t *pm = prepare_messages(t, messages, err);
    if (!pm)
        return -1;
    json_t *vars = json_object();
    int rc = vars ? 0 : lg_fail(err, "out of memory");
    if (rc == 0) {
        /* transformers: special tokens, then the caller's kwargs, then the conversation */
        if (t->bos)
            json_object_set_new(vars, "bos_token", json_string(t->bos));
        if (t->eos)
            json_object_set_new(vars, "eos_token", json_string(t->eos));
        if (json_is_object(kwargs))
            json_object_update(vars, (json_t *)kwargs);
        json_object_set(vars, "messages", pm);
        json_object_set_new(vars, "tools", tools && json_is_array(tools) ? json_incref((json_t *)tools) : json_null());
        json_object_set_new(vars, "documents",
                            documents && json_is_array(documents) ? json_incref((json_t *)documents) : json_null());
        json_object_set_new(vars, "add_generation_prompt", json_boolean(add_generation_prompt));
        rc = lg_jinja_render(t->jinja, vars, NULL, out, NULL, err);
        if (rc != 0)
            lg_err_prefix(err, "chat template");
    }
    json_decref(vars);
    json_decref(pm);
    return rc;
}

int lg_chat_template_apply(const lg_chat_template *t, const lg_chat_msg *msgs, int n_msgs, char **out,
                           lg_err *err)
{
    *out = NULL;
    if (t->family != LG_CHAT_JINJA)
        return builtin_apply(t, msgs, n_msgs, true, out, err);
    if (n_msgs <= 0)
        return lg_fail(err, "chat template: no messages");
    json_t *arr = json_array();
    int rc = arr ? 0 : lg_fail(err, "out of memory");
    for (int i = 0; i < n_msgs && rc == 0; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            rc = lg_fail(err, "chat template: message %d has no %s", i, msgs[i].role ? "content" : "role");
            break;
        }
        json_t *m = json_pack("{s:s, s:s}", "role", msgs[i].role, "content", msgs[i].content);
        if (!m || json_array_append_new(arr, m) != 0)
            rc = lg_fail(err, "out of memory (or invalid UTF-8 in message %d)", i);
    }
    if (rc == 0)
        rc = lg_chat_template_render(t, arr, NULL, NULL, NULL, true, out, err);
    json_decref(arr);
    return rc;
}
