/*
 * http_util.h — small HTTP helpers with no server state: OpenAI error
 * objects, reason phrases, request ids, media types and their parameters.
 *
 * Everything here is pure (no h2o, no I/O except the random source of
 * request ids) so that it can be unit-tested alone; the functions that send
 * a response live in request.h.
 *
 * OpenAI error objects. Every error answer of the gateway has the body
 *   {"error":{"message":"...","type":"...","param":null|"...","code":null|"..."}}
 * The type follows what OpenAI's API answers for the same status: 4xx are
 * "invalid_request_error" (401 too, with code "invalid_api_key"), 429 is
 * "requests" (or "tokens" / "insufficient_quota", given by the caller), 5xx
 * are "server_error". The message is one sentence naming the problem.
 */
#ifndef LG_GW_HTTP_UTIL_H
#define LG_GW_HTTP_UTIL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* "Not Found" for 404, ...; "Unknown" for a status we never send. */
const char *lg_http_reason(int status);

/* The OpenAI error type for a status (see the note above). */
const char *lg_openai_error_type(int status);

/* The error body as a malloc'd NUL-terminated JSON string (caller frees);
 * *len (may be NULL) gets its length. type NULL: lg_openai_error_type(status);
 * param and code may be NULL (JSON null). NULL only when out of memory. */
char *lg_openai_error_json(int status, const char *type, const char *message, const char *param, const char *code,
                           size_t *len);

/* Request ids: "req_" + 32 lowercase hex digits: the time in ms (12
 * digits, so ids sort by time and the usage ledger's request_id index
 * grows at its end) then 80 random bits from getrandom, buffered per
 * thread. out must hold LG_REQUEST_ID_LEN + 1. */
#define LG_REQUEST_ID_LEN 36
void lg_request_id_new(char *out);

/* Media types (RFC 9110 8.3.1). True when the Content-Type value ct (not
 * NUL-terminated, len bytes) has type/subtype `want` ("application/json"),
 * compared case-insensitively, parameters ignored. */
bool lg_media_type_is(const char *ct, size_t len, const char *want);

/* Copies the value of parameter `name` (case-insensitive) of the media type
 * ct into out (NUL-terminated), unquoting a quoted-string. Returns the value
 * length, -1 if the parameter is absent or malformed, -2 if it does not fit. */
int lg_media_type_param(const char *ct, size_t len, const char *name, char *out, size_t cap);

/* Percent-decodes src (len bytes) into out (cap bytes, NUL-terminated).
 * Refuses (returns -1) bad escapes, a decoded NUL or '/', and overflow;
 * returns the decoded length. '+' is kept as is (paths, not forms). */
int lg_percent_decode(const char *src, size_t len, char *out, size_t cap);
/* The same for application/x-www-form-urlencoded names and values: '+' is a
 * space and an escaped '/' is allowed; a decoded NUL is still refused. */
int lg_form_decode(const char *src, size_t len, char *out, size_t cap);

/* Authorization header value "Bearer <token>" (scheme case-insensitive,
 * spaces around the token allowed). Sets *tok and *tlen to the token (a slice
 * of v) and returns 0; -1 when the scheme is not Bearer or the token is
 * empty or holds characters outside RFC 6750's b64token
 * (ALPHA DIGIT - . _ ~ + / then "=" repeated). */
int lg_parse_bearer(const char *v, size_t len, const char **tok, size_t *tlen);

/* JSON-escaped copy of at most max bytes of s into a new json string (for
 * log fields: invalid UTF-8 replaced by '?', control characters kept
 * escaped by jansson). Caller owns the reference. */
json_t *lg_json_string_lossy(const char *s, size_t len, size_t max);

#endif
