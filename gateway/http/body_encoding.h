/*
 * body_encoding.h — request bodies sent with a Content-Encoding (RFC 9110
 * 8.4): gzip (also x-gzip) and deflate are decoded before the route sees
 * the body; identity is the body itself; anything else (br, zstd, compress,
 * a list of codings) is refused with 415.
 *
 * The limit applies to the decoded size: a body that inflates past it is a
 * 413, however small it was on the wire (a decompression bomb costs at most
 * the limit). "deflate" is the zlib format (RFC 1950) as HTTP defines it;
 * raw deflate data, which some clients send under that name, is accepted
 * too.
 */
#ifndef LG_GW_BODY_ENCODING_H
#define LG_GW_BODY_ENCODING_H

#include <stddef.h>

/* Decodes body (n bytes) sent with Content-Encoding enc (enc_len bytes, not
 * NUL-terminated). Returns 0 with *out NULL for identity (use the body as
 * it is), 0 with *out a malloc'd buffer of *out_len bytes (<= max_out) for
 * gzip/deflate, or -1 with *status 400 (corrupt), 413 (decoded past
 * max_out) or 415 (another coding) and a one-line message in msg. */
int lg_body_decode(const char *enc, size_t enc_len, const void *body, size_t n, size_t max_out, void **out,
                   size_t *out_len, int *status, char *msg, size_t msg_cap);

#endif
