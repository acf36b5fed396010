/*
 * body_encoding.c — see body_encoding.h. zlib's inflate, growing the output
 * buffer by doubling up to the limit (so memory follows the decoded size,
 * never more than twice it).
 */
#include "gateway/http/body_encoding.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

static int is_ows(char c) { return c == ' ' || c == '\t'; }

static int token_is(const char *s, size_t n, const char *want)
{
    while (n && is_ows(*s))
        s++, n--;
    while (n && is_ows(s[n - 1]))
        n--;
    return n == strlen(want) && strncasecmp(s, want, n) == 0;
}

/* window_bits: 16 + MAX_WBITS gzip, MAX_WBITS zlib, -MAX_WBITS raw deflate.
 * Returns 0, 1 for corrupt data, 2 for past max_out, 3 out of memory. */
static int inflate_all(const void *in, size_t n, int window_bits, size_t max_out, void **out, size_t *out_len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    if (inflateInit2(&z, window_bits) != Z_OK)
        return 3;
    size_t cap = n * 4 < 65536 ? 65536 : n * 4;
    if (cap > max_out + 1)
        cap = max_out + 1;
    unsigned char *buf = malloc(cap ? cap : 1);
    if (!buf) {
        inflateEnd(&z);
        return 3;
    }
    z.next_in = (unsigned char *)in;
    size_t in_left = n, used = 0;
    int rc = Z_OK, ret = 0;
    while (rc != Z_STREAM_END) {
        if (used == cap) {
            if (cap > max_out) { /* one byte past the limit was produced */
                ret = 2;
                break;
            }
            size_t nc = cap * 2 > max_out + 1 ? max_out + 1 : cap * 2;
            unsigned char *nb = realloc(buf, nc);
            if (!nb) {
                ret = 3;
                break;
            }
            buf = nb;
            cap = nc;
        }
        z.next_out = buf + used;
        size_t room = cap - used;
        z.avail_out = room > 1u << 30 ? 1u << 30 : (unsigned)room;
        size_t chunk = in_left > 1u << 30 ? 1u << 30 : in_left;
        z.avail_in = (unsigned)chunk;
        rc = inflate(&z, Z_NO_FLUSH);
        size_t consumed = chunk - z.avail_in;
        in_left -= consumed;
        used = (size_t)(z.next_out - buf);
        if (rc == Z_STREAM_END)
            break;
        if (rc != Z_OK && !(rc == Z_BUF_ERROR && used == cap)) {
            ret = 1;
            break;
        }
        if (rc == Z_OK && in_left == 0 && z.avail_in == 0 && used < cap) { /* input ended before the stream did */
            ret = 1;
            break;
        }
    }
    if (ret == 0 && used > max_out)
        ret = 2;
    if (ret == 0 && in_left > 0 && rc == Z_STREAM_END) {
        /* trailing bytes after the stream: a second gzip member is allowed by RFC 1952, not by us */
        ret = 1;
    }
    inflateEnd(&z);
    if (ret != 0) {
        free(buf);
        return ret;
    }
    *out = buf;
    *out_len = used;
    return 0;
}

int lg_body_decode(const char *enc, size_t enc_len, const void *body, size_t n, size_t max_out, void **out,
                   size_t *out_len, int *status, char *msg, size_t msg_cap)
{
    *out = NULL;
    *out_len = 0;
    if (!enc || token_is(enc, enc_len, "identity") || enc_len == 0)
        return 0;
    int wb;
    const char *name;
    if (token_is(enc, enc_len, "gzip") || token_is(enc, enc_len, "x-gzip"))
        wb = 16 + MAX_WBITS, name = "gzip";
    else if (token_is(enc, enc_len, "deflate"))
        wb = MAX_WBITS, name = "deflate";
    else {
        *status = 415;
        snprintf(msg, msg_cap, "Content-Encoding '%.*s' is not supported; send the body as it is, or with gzip or deflate.",
                 (int)(enc_len > 40 ? 40 : enc_len), enc);
        return -1;
    }
    int rc = inflate_all(body, n, wb, max_out, out, out_len);
    if (rc == 1 && wb == MAX_WBITS) /* "deflate" sent as raw deflate data */
        rc = inflate_all(body, n, -MAX_WBITS, max_out, out, out_len);
    if (rc == 0)
        return 0;
    if (rc == 2) {
        *status = 413;
        snprintf(msg, msg_cap, "The %s request body decodes to more than %zu bytes, the most this route accepts.", name,
                 max_out);
    } else if (rc == 3) {
        *status = 503;
        snprintf(msg, msg_cap, "The server is out of memory; please retry.");
    } else {
        *status = 400;
        snprintf(msg, msg_cap, "The request body is not valid %s data (Content-Encoding: %s).", name, name);
    }
    return -1;
}
