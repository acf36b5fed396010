/*
 * http_util.c — see http_util.h. Request ids come from getrandom(2) through
 * a per-thread buffer of 4 KiB (one syscall per 256 ids), so minting an id
 * costs a copy and a hex encoding.
 */
#include "gateway/http/http_util.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <strings.h>
#include <sys/random.h>

const char *lg_http_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Payload Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 507: return "Insufficient Storage";
    }
    return "Unknown";
}

const char *lg_openai_error_type(int status)
{
    if (status == 429)
        return "requests";
    if (status >= 500)
        return "server_error";
    return "invalid_request_error";
}

char *lg_openai_error_json(int status, const char *type, const char *message, const char *param, const char *code,
                           size_t *len)
{
    /* lossy strings: a message quoting client input never turns into a 500 */
    const char *m = message ? message : lg_http_reason(status), *t = type ? type : lg_openai_error_type(status);
    json_t *err = json_pack("{s:o, s:o, s:o, s:o}", "message", lg_json_string_lossy(m, strlen(m), 4096), "type",
                            lg_json_string_lossy(t, strlen(t), 256), "param",
                            param ? lg_json_string_lossy(param, strlen(param), 256) : json_null(), "code",
                            code ? lg_json_string_lossy(code, strlen(code), 256) : json_null());
    if (!err)
        return NULL;
    json_t *root = json_pack("{s:o}", "error", err);
    if (!root)
        return NULL;
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (s && len)
        *len = strlen(s);
    return s;
}

/* ---- request ids -------------------------------------------------------- */

static __thread uint8_t rid_buf[4096];
static __thread size_t rid_left;

static void rid_refill(void)
{
    size_t got = 0;
    while (got < sizeof rid_buf) {
        ssize_t n = getrandom(rid_buf + got, sizeof rid_buf - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break; /* cannot happen on Linux >= 3.17 once the pool is initialised */
        }
        got += (size_t)n;
    }
    rid_left = sizeof rid_buf;
}

void lg_request_id_new(char *out)
{
    static const char hex[] = "0123456789abcdef";
    if (rid_left < 10)
        rid_refill();
    const uint8_t *b = rid_buf + sizeof rid_buf - rid_left;
    /* time first (ms, 48 bits), then 80 random bits: the ledger's request_id
     * index grows at its end (docs/benchmarks.md, Ledger) */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ms = ((uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000) & 0xffffffffffffull;
    memcpy(out, "req_", 4);
    for (int i = 0; i < 12; i++)
        out[4 + i] = hex[(ms >> (44 - 4 * i)) & 15];
    for (int i = 0; i < 10; i++) {
        out[16 + 2 * i] = hex[b[i] >> 4];
        out[17 + 2 * i] = hex[b[i] & 15];
    }
    out[LG_REQUEST_ID_LEN] = 0;
    memset(rid_buf + sizeof rid_buf - rid_left, 0, 10); /* random bytes are never handed out twice */
    rid_left -= 10;
}

/* ---- media types ----------------------------------------------------------- */

static bool is_ows(char c) { return c == ' ' || c == '\t'; }

bool lg_media_type_is(const char *ct, size_t len, const char *want)
{
    size_t i = 0, wl = strlen(want);
    while (i < len && is_ows(ct[i]))
        i++;
    size_t start = i;
    while (i < len && ct[i] != ';' && !is_ows(ct[i]))
        i++;
    if (i - start != wl || strncasecmp(ct + start, want, wl) != 0)
        return false;
    while (i < len && is_ows(ct[i]))
        i++;
    return i == len || ct[i] == ';';
}

static bool is_tchar(unsigned char c)
{
    return isalnum(c) || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

int lg_media_type_param(const char *ct, size_t len, const char *name, char *out, size_t cap)
{
    size_t nl = strlen(name), i = 0;
    /* skip the type/subtype */
    while (i < len && ct[i] != ';') {
        if (ct[i] == '"')
            return -1;
        i++;
    }
    while (i < len) {
        /* at ';' */
        i++;
        while (i < len && is_ows(ct[i]))
            i++;
        size_t ks = i;
        while (i < len && is_tchar((unsigned char)ct[i]))
            i++;
        size_t kl = i - ks;
        if (kl == 0 || i >= len || ct[i] != '=')
            return -1; /* parameters are name=value */
        i++;
        bool match = kl == nl && strncasecmp(ct + ks, name, nl) == 0;
        size_t o = 0;
        if (i < len && ct[i] == '"') {
            i++;
            bool closed = false;
            while (i < len) {
                char c = ct[i++];
                if (c == '"') {
                    closed = true;
                    break;
                }
                if (c == '\\') {
                    if (i >= len)
                        return -1;
                    c = ct[i++];
                }
                if ((unsigned char)c < 0x20 && c != '\t')
                    return -1;
                if (match) {
                    if (o + 1 >= cap)
                        return -2;
                    out[o++] = c;
                }
            }
            if (!closed)
                return -1;
        } else {
            size_t vs = i;
            while (i < len && is_tchar((unsigned char)ct[i]))
                i++;
            if (i == vs)
                return -1;
            if (match) {
                if (i - vs + 1 > cap)
                    return -2;
                memcpy(out, ct + vs, i - vs);
                o = i - vs;
            }
        }
        while (i < len && is_ows(ct[i]))
            i++;
        if (i < len && ct[i] != ';')
            return -1;
        if (match) {
            out[o] = 0;
            return (int)o;
        }
    }
    return -1;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* form: application/x-www-form-urlencoded ('+' is a space, '/' may be escaped) */
static int pct_decode(const char *src, size_t len, char *out, size_t cap, bool form)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (c == '+' && form) {
            c = ' ';
        } else if (c == '%') {
            int hi, lo;
            if (i + 2 >= len || (hi = hexval(src[i + 1])) < 0 || (lo = hexval(src[i + 2])) < 0)
                return -1;
            c = (char)(hi << 4 | lo);
            i += 2;
            if (c == 0 || (c == '/' && !form))
                return -1;
        } else if (c == 0 && form) {
            return -1;
        }
        if (o + 1 >= cap)
            return -1;
        out[o++] = c;
    }
    if (cap == 0)
        return -1;
    out[o] = 0;
    return (int)o;
}

int lg_percent_decode(const char *src, size_t len, char *out, size_t cap) { return pct_decode(src, len, out, cap, false); }

int lg_form_decode(const char *src, size_t len, char *out, size_t cap) { return pct_decode(src, len, out, cap, true); }

/* ---- Authorization: Bearer ------------------------------------------------- */

static bool b64token_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~' || c == '+' || c == '/';
}

int lg_parse_bearer(const char *v, size_t len, const char **tok, size_t *tlen)
{
    size_t i = 0;
    while (i < len && is_ows(v[i]))
        i++;
    if (len - i < 7 || strncasecmp(v + i, "bearer", 6) != 0 || !is_ows(v[i + 6]))
        return -1;
    i += 7;
    while (i < len && is_ows(v[i]))
        i++;
    size_t s = i;
    while (i < len && b64token_char(v[i]))
        i++;
    if (i == s)
        return -1;
    while (i < len && v[i] == '=')
        i++;
    size_t e = i;
    while (i < len && is_ows(v[i]))
        i++;
    if (i != len)
        return -1;
    *tok = v + s;
    *tlen = e - s;
    return 0;
}

json_t *lg_json_string_lossy(const char *s, size_t len, size_t max)
{
    if (len > max)
        len = max;
    json_t *j = json_stringn(s, len);
    if (j)
        return j;
    char *c = malloc(len + 1);
    if (!c)
        return json_string("");
    for (size_t i = 0; i < len; i++)
        c[i] = ((unsigned char)s[i] >= 0x80 || s[i] == 0) ? '?' : s[i];
    j = json_stringn(c, len);
    free(c);
    return j ? j : json_string("");
}
