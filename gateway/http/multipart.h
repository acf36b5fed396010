/*
 * multipart.h — a streaming multipart/form-data parser (RFC 7578 over the
 * RFC 2046 multipart syntax), and a sink that writes a part to a file
 * descriptor while hashing it with SHA-256.
 *
 * Why our own: Debian has no maintained C library for it (apt-cache search
 * multipart: Perl, Ruby, Haskell, Node and Python parsers only), and the
 * job is small. Adapter uploads carry two parts (adapter_config.json and
 * adapter_model.safetensors, up to 1 GiB), so the parser never holds a
 * part's content: it hands it to on_part_data in pieces as it goes.
 *
 * Syntax accepted (strict where the RFCs are, bounded everywhere):
 *   body      := preamble? "--" B (LWSP) CRLF part ("\r\n--" B LWSP CRLF part)*
 *                "\r\n--" B "--" epilogue?
 *   part      := header-line* CRLF content        (header lines end in CRLF)
 * The first delimiter may start the body (no CRLF before it); the preamble
 * and epilogue are ignored. The delimiter is recognised only as CRLF "--"
 * boundary, so content may contain "--boundary" not preceded by CRLF. The
 * boundary (from the Content-Type, 1..70 chars of RFC 2046 bchars, not
 * ending in a space) cannot contain CR, so a partial delimiter match never
 * hides another one: the matcher needs no buffer beyond the delimiter text.
 * Each part must have exactly one Content-Disposition: form-data with a
 * name; filename and Content-Type are optional (default text/plain). Bare
 * LF line ends, folded headers, control characters, NULs, duplicate
 * Content-Disposition/Content-Type, oversized header sections and too many
 * parts are refused with a message naming the problem.
 *
 * Workload: one parse per upload; cost is one pass with memchr for CR over
 * the content.
 */
#ifndef LG_GW_MULTIPART_H
#define LG_GW_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/base/common.h"

#define LG_MP_MAX_BOUNDARY 70
#define LG_MP_MAX_NAME 255

typedef struct lg_mp_part {
    int index;                          /* 0-based */
    char name[LG_MP_MAX_NAME + 1];      /* form field name */
    char filename[LG_MP_MAX_NAME + 1];  /* "" when has_filename is false */
    bool has_filename;
    char content_type[128];             /* "text/plain" when absent */
    size_t size;                        /* content bytes so far (final at on_part_end) */
} lg_mp_part;

/* Each returns 0 to go on, -1 to stop the parse (fill err). */
typedef struct lg_mp_callbacks {
    int (*on_part_begin)(void *user, const lg_mp_part *p, lg_err *err);
    int (*on_part_data)(void *user, const lg_mp_part *p, const void *data, size_t len, lg_err *err);
    int (*on_part_end)(void *user, const lg_mp_part *p, lg_err *err);
} lg_mp_callbacks;

typedef struct lg_mp_limits {
    int max_parts;            /* 0: 16 */
    size_t max_header_bytes;  /* per part's header section; 0: 8192 */
    size_t max_part_bytes;    /* per part's content; 0: no limit here */
} lg_mp_limits;

typedef struct lg_multipart lg_multipart;

/* The boundary parameter of a multipart/form-data Content-Type (validated).
 * out must hold LG_MP_MAX_BOUNDARY + 1 bytes. */
int lg_multipart_boundary(const char *content_type, size_t len, char *out, lg_err *err);

int lg_multipart_create(const char *boundary, const lg_mp_limits *lim, const lg_mp_callbacks *cb, void *user,
                        lg_multipart **out, lg_err *err);
void lg_multipart_free(lg_multipart *m); /* NULL: no-op */
/* Feeds the next len bytes (any split). After an error every call fails. */
int lg_multipart_feed(lg_multipart *m, const void *data, size_t len, lg_err *err);
/* The body ended: fails unless the closing delimiter was seen. */
int lg_multipart_finish(lg_multipart *m, lg_err *err);
int lg_multipart_parts(const lg_multipart *m); /* parts begun so far */

/* ---- writing a part to a file while hashing it -------------------------- */
typedef struct lg_file_sink {
    int fd;
    size_t bytes;
    size_t max_bytes;   /* 0: no limit */
    void *sha;          /* EVP_MD_CTX */
} lg_file_sink;

int lg_file_sink_init(lg_file_sink *s, int fd, size_t max_bytes, lg_err *err);
/* Writes all of data (EINTR and short writes handled) and hashes it. */
int lg_file_sink_write(lg_file_sink *s, const void *data, size_t len, lg_err *err);
/* digest (32 bytes) and/or hex (65) may be NULL; frees the hash state. */
int lg_file_sink_finish(lg_file_sink *s, uint8_t *digest, char *hex, lg_err *err);
void lg_file_sink_discard(lg_file_sink *s); /* frees the hash state after an error */

#endif
