/*
 * tool_calls_internal.h — what the tool-call parsers (tool_calls_*.c) share:
 * reading one JSON value out of running text, turning a parsed call object
 * into the {name, arguments} form, and finding a marker that may be cut
 * short at the end of streamed text. Not for use outside tool_calls*.c.
 */
#ifndef LG_GW_TOOL_CALLS_INTERNAL_H
#define LG_GW_TOOL_CALLS_INTERNAL_H

#include "gateway/tool_calls.h"

extern const lg_tc_parser lg_tc_hermes, lg_tc_llama3_json, lg_tc_mistral, lg_tc_granite;

/* Skips ASCII whitespace from s[*i]. */
void lg_tc_skip_ws(const char *s, size_t n, size_t *i);
/* One JSON value starting at s[*i] (after whitespace); *i moves past it.
 * NULL (and *i unchanged) when none parses there. */
json_t *lg_tc_json_at(const char *s, size_t n, size_t *i);
/* Appends {name, arguments} to calls from obj = {"name": string,
 * "arguments" | "parameters": object or JSON text}. -1 when obj is not such
 * an object or calls is full. */
int lg_tc_add_call(json_t *calls, const json_t *obj);
/* Appends a call from its parts (args: a JSON object). -1 as above. */
int lg_tc_add_call_parts(json_t *calls, const char *name, size_t name_len, const json_t *args);
/* s[0..n) without surrounding whitespace, malloc'd; NULL when nothing is left. */
char *lg_tc_trim_dup(const char *s, size_t n);
/* The first occurrence of marker in s[0..n), or NULL. */
const char *lg_tc_find(const char *s, size_t n, const char *marker);
/* Where marker starts in s[0..n), or where an end of s starts that is a
 * beginning of marker (it may be cut short); n when neither. */
size_t lg_tc_hold_marker(const char *s, size_t n, const char *marker);

#endif
