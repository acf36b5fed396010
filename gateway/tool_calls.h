/*
 * tool_calls.h — OpenAI function calling on top of a model that writes
 * text: what a request's `tools` / `tool_choice` / `parallel_tool_calls`
 * mean for its prompt and its output grammar (tool_calls_request.c), and
 * how a model's output is read back as calls (one parser per output format,
 * tool_calls_<format>.c).
 *
 * A call, as every function here hands it over, is a JSON object
 * {"name": "<function>", "arguments": "<the arguments as a JSON text>"}:
 * OpenAI's `function` object, which the routes wrap with an id and a type.
 *
 * How a request's output is read (lg_tc_mode):
 *   NONE      no tools, or tool_choice "none": plain text.
 *   AUTO      tool_choice "auto": the model may write calls in its family's
 *             format; the parser finds them. Output that has no call, or
 *             whose call does not parse, is plain text (as vLLM answers).
 *   NAMED     tool_choice {"type": "function", "function": {"name"}}: the
 *             output is constrained to that function's parameters schema
 *             and is the call's arguments.
 *   REQUIRED  tool_choice "required": the output is constrained to a JSON
 *             array of {"name": const, "parameters": schema} (one item when
 *             parallel_tool_calls is false), each item one call.
 *
 * Parsers (lg_tc_parser_find), the formats model families are trained to
 * write (their chat templates say so):
 *   hermes       <tool_call>{"name": .., "arguments": {..}}</tool_call> ...
 *                (Hermes 2 Pro / 3, Qwen 2.5, Qwen 3, SmolLM3, ...)
 *   llama3_json  {"name": .., "parameters": {..}} (optionally after
 *                <|python_tag|>, several separated by ';') (Llama 3.1-3.3)
 *   mistral      [TOOL_CALLS][{"name": .., "arguments": {..}}, ...] and the
 *                newer [TOOL_CALLS]name[ARGS]{..} (Mistral, Mixtral, Nemo,
 *                Small 3.x, Ministral, Devstral)
 *   granite      <|tool_call|>[{"name": .., "arguments": {..}}, ...]
 *                (IBM Granite 3.x / 4.x)
 * lg_tc_parser_for_template picks one from the template's text; the
 * --tool-call-parser option names one instead.
 *
 * Streaming: lg_tc_parser.hold says how much of the text so far is plain
 * text for sure (it can be streamed as content); the rest is held until
 * the choice ends, then parsed whole. Only the named mode streams argument
 * fragments as they are generated.
 *
 * Limits: calls are read from the text the detokenizer released, so a
 * parser whose markers are special tokens needs them kept
 * (lg_tc_parser.keeps_special: the route then decodes with
 * skip_special_tokens false). Unknown function names are returned as
 * written (OpenAI clients report them); at most LG_TC_MAX_CALLS calls.
 */
#ifndef LG_GW_TOOL_CALLS_H
#define LG_GW_TOOL_CALLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define LG_TC_MAX_CALLS 64
#define LG_TC_MAX_TOOLS 128
#define LG_TC_NAME_MAX 64 /* OpenAI: a-z, A-Z, 0-9, '_' and '-', at most 64 */

typedef enum lg_tc_mode { LG_TC_NONE = 0, LG_TC_AUTO, LG_TC_NAMED, LG_TC_REQUIRED } lg_tc_mode;

/* What a parser found in a whole output: content (text outside the calls,
 * malloc'd, NULL when there is none) and calls (a new JSON array of
 * {name, arguments}). */
typedef struct lg_tc_result {
    char *content;
    json_t *calls;
} lg_tc_result;
void lg_tc_result_dispose(lg_tc_result *r);

typedef struct lg_tc_parser {
    const char *name;
    bool keeps_special; /* its markers are special tokens: decode them */
    int id_len;         /* call ids its templates accept: 0 "call_" + 24 letters and digits; else this many
                         * letters and digits (Mistral's templates insist on 9) */
    /* The length of the prefix of text[0..n) that is plain text whatever
     * follows: a call (or its marker, perhaps cut short) may start there. */
    size_t (*hold)(const char *text, size_t n);
    /* The whole output: 1 with *out filled when it holds calls that parse;
     * 0 when it is plain text (no call, or one that does not parse); -1 out
     * of memory. */
    int (*parse)(const char *text, size_t n, lg_tc_result *out);
} lg_tc_parser;

/* The parser called name ("hermes", "llama3_json", "mistral", "granite"),
 * or NULL. lg_tc_parser_names: "hermes|llama3_json|mistral|granite". */
const lg_tc_parser *lg_tc_parser_find(const char *name);
const char *lg_tc_parser_names(void);
/* The parser whose format the template's text teaches, or NULL. */
const lg_tc_parser *lg_tc_parser_for_template(const char *template_text);

/* Forced modes: the constrained output as calls. NAMED: the whole text is
 * the arguments of `name`; REQUIRED: a JSON array of {name, parameters}.
 * Same returns as lg_tc_parser.parse. */
int lg_tc_parse_forced(lg_tc_mode mode, const char *name, const char *text, size_t n, lg_tc_result *out);

/* A new call id, "call_" + 24 letters and digits, into out (>= 32 bytes);
 * lg_tc_new_id_for: in the shape parser p's templates accept (p may be NULL). */
void lg_tc_new_id(char *out, size_t n);
void lg_tc_new_id_for(const lg_tc_parser *p, char *out, size_t n);

/* ---- the request side (tool_calls_request.c) ---- */

typedef struct lg_tc_request {
    lg_tc_mode mode;
    json_t *tools;             /* the request's tools, normalized for the template: [{type, function:
                                * {name, description?, parameters, strict?}}]; NULL when none */
    char name[LG_TC_NAME_MAX + 1]; /* NAMED: the function */
    bool parallel;             /* parallel_tool_calls (default true) */
    char *schema;              /* NAMED / REQUIRED: the output's JSON schema (malloc'd compact JSON) */
} lg_tc_request;

/* Reads tools, tool_choice and parallel_tool_calls of a chat body into *tr
 * (zeroed first). 0, or -1 with param and msg filled (a 400). */
int lg_tc_request_parse(const json_t *body, lg_tc_request *tr, char *param, size_t pn, char *msg, size_t mn);
void lg_tc_request_dispose(lg_tc_request *tr);

#endif
