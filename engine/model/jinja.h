/*
 * jinja.h — a sandboxed Jinja interpreter for model chat templates.
 *
 * What: parses a Jinja template text once (lg_jinja_parse) and renders it
 * any number of times, from any number of threads at once, with variables
 * given as a JSON object (lg_jinja_render). It renders the way Hugging Face
 * transformers' apply_chat_template does: jinja2's ImmutableSandboxedEnvironment
 * with trim_blocks, lstrip_blocks and loopcontrols, the `tojson` filter as
 * json.dumps(ensure_ascii=False), and the globals raise_exception,
 * strftime_now, namespace, dict and range. tests/chat compares our output
 * with transformers' on the real templates of many model families, byte for
 * byte, including where the template raises.
 *
 * Why our own: templates come with models and with tenants' adapters, so they
 * are hostile input to a multi-tenant server. The interpreter has no I/O, no
 * include/import, no mutation of lists or dicts (as jinja2's immutable
 * sandbox), and every render is bounded: output bytes, memory, evaluation
 * steps and nesting depth. Exceeding a bound, a template that raises, an
 * unknown filter or a type error all return -1 with one line in lg_err;
 * nothing aborts the process.
 *
 * How: jinja_lex.c (text -> tokens, whitespace control), jinja_parse.c
 * (tokens -> AST), jinja_value.c (the value type with Python's semantics:
 * str()/repr(), ==, <, JSON in and out), jinja_eval.c (statements and
 * expressions), jinja_filters.c (filters, tests, globals, methods of
 * str/dict/list). Each render allocates from its own arena, freed at the
 * end; strings from the JSON variables are borrowed, not copied.
 *
 * Limits (documented gaps): no {% include/import/extends/block %} (no
 * loader, as in transformers), no recursive for loops, no star-args or double-star-kwargs in
 * calls, macros without varargs/kwargs; what jinja2 returns as a generator is
 * a list marked as one (|length and |tojson on it fail as in Python, but it
 * can be iterated twice); Python's full Unicode case mappings (e.g. 'ß'.upper()
 * == 'SS') are the simple ones of utf8proc; str.format without format specs.
 */
#ifndef LG_JINJA_H
#define LG_JINJA_H

#include <jansson.h>

#include "engine/base/common.h"

typedef struct lg_jinja lg_jinja;

typedef struct lg_jinja_limits {
    size_t max_output;  /* bytes of rendered text (default 32 MiB) */
    size_t max_memory;  /* bytes of working memory per render (default 256 MiB) */
    uint64_t max_steps; /* expressions, statements and loop iterations (default 50 M) */
    int max_depth;      /* nesting of expressions and macro calls (default 256) */
} lg_jinja_limits;

/* Parses text[0..len). *out is freed with lg_jinja_free. The text need not
 * outlive the template. */
int lg_jinja_parse(const char *text, size_t len, lg_jinja **out, lg_err *err);
void lg_jinja_free(lg_jinja *t); /* NULL is a no-op */

/* True when the template loops over a message's `content` (it reads content
 * as a list of parts), the way vLLM tells "openai" from "string" content. */
bool lg_jinja_iterates_content(const lg_jinja *t);

/* Renders with the members of the JSON object vars as the template's
 * variables (vars may be NULL). vars must stay valid during the call. lim may
 * be NULL (defaults). *out is malloc'd, NUL-terminated; *out_len (may be
 * NULL) is its length. On error *out is NULL. */
int lg_jinja_render(const lg_jinja *t, const json_t *vars, const lg_jinja_limits *lim, char **out,
                    size_t *out_len, lg_err *err);

#endif
