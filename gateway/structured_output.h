/*
 * structured_output.h — what a request asks its output to follow, read from
 * its body: OpenAI's response_format, vLLM's structured_outputs and its
 * older guided_* fields. The result is a grammar source (constrain.h's kind
 * and text) that the route compiles (through the served model's compile
 * cache, on a worker thread) before anything runs.
 *
 *   response_format {"type": "text"}                      nothing
 *   response_format {"type": "json_object"}               any JSON object (JSON mode)
 *   response_format {"type": "json_schema", "json_schema":
 *       {"name", "schema", "strict", "description"}}      valid against the schema
 *   structured_outputs {"json": schema | "regex": ".." |
 *       "choice": [..] | "grammar": "lark" | "json_object": true}
 *   guided_json, guided_regex, guided_choice, guided_grammar (vLLM's older names)
 *
 * One request asks for at most one of these (a second is a 400 naming it).
 * `strict` is accepted either way and changes nothing: the schema is
 * enforced in both modes, and a keyword we cannot enforce is refused in both
 * (docs/api.md lists them). The output is compact JSON (no whitespace
 * between tokens, properties in the schema's order).
 *
 * Errors name the field: a compile error's param is the field the grammar
 * came from, followed for a schema by "#" and the JSON pointer inside it
 * ("response_format.json_schema.schema#/properties/age/not").
 */
#ifndef LG_GW_STRUCTURED_OUTPUT_H
#define LG_GW_STRUCTURED_OUTPUT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "engine/runtime/constrain/constrain.h"

typedef struct lg_so_spec {
    bool present;
    lg_ckind kind;
    char *src;          /* malloc'd: the schema (compact JSON), regex, grammar or choices (a JSON array) */
    size_t len;
    char param[80];     /* the field it came from, e.g. "response_format.json_schema.schema" */
} lg_so_spec;

/* True when key is one of the fields this file reads. */
bool lg_so_is_key(const char *key);

/* Reads the fields above from body. 0: *spec filled (present false when the
 * request asks for nothing); -1: the request is malformed, param and msg
 * say where and why (a 400). */
int lg_so_parse(const json_t *body, lg_so_spec *spec, char *param, size_t pn, char *msg, size_t mn);
void lg_so_spec_dispose(lg_so_spec *s);

/* The 400's param of a compile error e of spec s: s->param, then "#<pointer>"
 * when e's place is a JSON pointer, else " (<place>)" when it has one. */
void lg_so_error_param(const lg_so_spec *s, const lg_cerr *e, char *out, size_t n);

#endif
