/*
 * multipart.c — see multipart.h. A byte-driven state machine; the content
 * of a part is emitted in runs found with memchr('\r'), the delimiter
 * "\r\nB--boundary" matched by an index into the delimiter text (dm).
 */
#include "gateway/http/multipart.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "gateway/http/http_util.h"

enum st { ST_PREAMBLE, ST_AFTER_DELIM, ST_AFTER_DELIM_CR, ST_CLOSE_DASH, ST_HEADERS, ST_BODY, ST_EPILOGUE, ST_ERROR };

struct lg_multipart {
    enum st st;
    char delim[4 + LG_MP_MAX_BOUNDARY + 1]; /* "\r\n--" + boundary */
    size_t dlen, dm;
    lg_mp_limits lim;
    lg_mp_callbacks cb;
    void *user;
    lg_mp_part part;
    int n_parts;
    int lwsp;
    /* headers of the current part */
    char *line;
    size_t line_len, hbytes;
    bool has_disp, has_ctype;
    char errmsg[256];
};

static bool bchar(unsigned char c)
{
    return isalnum(c) || strchr("'()+_,-./:=? ", c) != NULL;
}

static int check_boundary(const char *b, lg_err *err)
{
    size_t n = strlen(b);
    if (n < 1 || n > LG_MP_MAX_BOUNDARY)
        return lg_fail(err, "multipart boundary must be 1 to 70 characters (got %zu)", n);
    for (size_t i = 0; i < n; i++)
        if (!bchar((unsigned char)b[i]))
            return lg_fail(err, "multipart boundary has a character not allowed by RFC 2046 (0x%02x)", (unsigned char)b[i]);
    if (b[n - 1] == ' ')
        return lg_fail(err, "multipart boundary must not end with a space");
    return 0;
}

int lg_multipart_boundary(const char *ct, size_t len, char *out, lg_err *err)
{
    if (!lg_media_type_is(ct, len, "multipart/form-data"))
        return lg_fail(err, "Content-Type is not multipart/form-data");
    char b[LG_MP_MAX_BOUNDARY + 2];
    int r = lg_media_type_param(ct, len, "boundary", b, sizeof b);
    if (r == -2)
        return lg_fail(err, "multipart boundary longer than 70 characters");
    if (r < 0)
        return lg_fail(err, "multipart/form-data without a valid boundary parameter");
    if (check_boundary(b, err) != 0)
        return -1;
    strcpy(out, b);
    return 0;
}

int lg_multipart_create(const char *boundary, const lg_mp_limits *lim, const lg_mp_callbacks *cb, void *user,
                        lg_multipart **out, lg_err *err)
{
    *out = NULL;
    if (check_boundary(boundary, err) != 0)
        return -1;
    lg_multipart *m = calloc(1, sizeof *m);
    if (!m)
        return lg_fail(err, "out of memory");
    if (lim)
        m->lim = *lim;
    if (m->lim.max_parts <= 0)
        m->lim.max_parts = 16;
    if (!m->lim.max_header_bytes)
        m->lim.max_header_bytes = 8192;
    m->line = malloc(m->lim.max_header_bytes + 1);
    if (!m->line) {
        free(m);
        return lg_fail(err, "out of memory");
    }
    m->cb = *cb;
    m->user = user;
    m->dlen = (size_t)snprintf(m->delim, sizeof m->delim, "\r\n--%s", boundary);
    m->st = ST_PREAMBLE;
    m->dm = 2; /* the body may open with the delimiter: as if a CRLF preceded it */
    *out = m;
    return 0;
}

void lg_multipart_free(lg_multipart *m)
{
    if (!m)
        return;
    free(m->line);
    free(m);
}

int lg_multipart_parts(const lg_multipart *m) { return m->n_parts; }

static int fail(lg_multipart *m, lg_err *err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(lg_multipart *m, lg_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->errmsg, sizeof m->errmsg, fmt, ap);
    va_end(ap);
    m->st = ST_ERROR;
    return lg_fail(err, "%s", m->errmsg);
}

static int cb_fail(lg_multipart *m, lg_err *err)
{
    m->st = ST_ERROR;
    snprintf(m->errmsg, sizeof m->errmsg, "%s", err ? err->msg : "stopped by the receiver");
    return -1;
}

static int emit(lg_multipart *m, const char *p, size_t n, lg_err *err)
{
    if (!n)
        return 0;
    if (m->lim.max_part_bytes && m->part.size + n > m->lim.max_part_bytes)
        return fail(m, err, "multipart part '%s' is larger than %zu bytes", m->part.name, m->lim.max_part_bytes);
    m->part.size += n;
    if (m->cb.on_part_data && m->cb.on_part_data(m->user, &m->part, p, n, err) != 0)
        return cb_fail(m, err);
    return 0;
}

static int begin_headers(lg_multipart *m, lg_err *err)
{
    if (m->n_parts >= m->lim.max_parts)
        return fail(m, err, "multipart body has more than %d parts", m->lim.max_parts);
    memset(&m->part, 0, sizeof m->part);
    m->part.index = m->n_parts++;
    strcpy(m->part.content_type, "text/plain");
    m->line_len = m->hbytes = 0;
    m->has_disp = m->has_ctype = false;
    m->st = ST_HEADERS;
    return 0;
}

static int header_line(lg_multipart *m, lg_err *err)
{
    char *l = m->line;
    size_t n = m->line_len;
    int idx = m->part.index;
    if (l[0] == ' ' || l[0] == '\t')
        return fail(m, err, "multipart part %d: folded header lines are not allowed", idx);
    char *colon = memchr(l, ':', n);
    if (!colon || colon == l)
        return fail(m, err, "multipart part %d: malformed header line (no name: value)", idx);
    size_t nl = (size_t)(colon - l);
    for (size_t i = 0; i < nl; i++)
        if (!isalnum((unsigned char)l[i]) && !strchr("!#$%&'*+-.^_`|~", l[i]))
            return fail(m, err, "multipart part %d: invalid character in a header name", idx);
    const char *v = colon + 1;
    size_t vl = n - nl - 1;
    while (vl && (*v == ' ' || *v == '\t'))
        v++, vl--;
    while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
        vl--;
    if (nl == 19 && !strncasecmp(l, "content-disposition", 19)) {
        if (m->has_disp)
            return fail(m, err, "multipart part %d: two Content-Disposition headers", idx);
        m->has_disp = true;
        if (!lg_media_type_is(v, vl, "form-data"))
            return fail(m, err, "multipart part %d: Content-Disposition must be form-data", idx);
        int r = lg_media_type_param(v, vl, "name", m->part.name, sizeof m->part.name);
        if (r == -2)
            return fail(m, err, "multipart part %d: field name longer than %d bytes", idx, LG_MP_MAX_NAME);
        if (r <= 0)
            return fail(m, err, "multipart part %d: Content-Disposition without a name", idx);
        r = lg_media_type_param(v, vl, "filename", m->part.filename, sizeof m->part.filename);
        if (r == -2)
            return fail(m, err, "multipart part %d: filename longer than %d bytes", idx, LG_MP_MAX_NAME);
        if (r >= 0)
            m->part.has_filename = true;
        else
            m->part.filename[0] = 0;
    } else if (nl == 12 && !strncasecmp(l, "content-type", 12)) {
        if (m->has_ctype)
            return fail(m, err, "multipart part %d: two Content-Type headers", idx);
        m->has_ctype = true;
        if (vl == 0 || vl >= sizeof m->part.content_type)
            return fail(m, err, "multipart part %d: empty or over-long Content-Type", idx);
        memcpy(m->part.content_type, v, vl);
        m->part.content_type[vl] = 0;
    }
    /* other headers (Content-Transfer-Encoding is deprecated by RFC 7578) are ignored */
    return 0;
}

int lg_multipart_feed(lg_multipart *m, const void *data, size_t len, lg_err *err)
{
    const char *d = data;
    size_t i = 0;
    if (m->st == ST_ERROR)
        return lg_fail(err, "%s", m->errmsg);
    while (i < len) {
        switch (m->st) {
        case ST_PREAMBLE:
        case ST_BODY: {
            bool body = m->st == ST_BODY;
            if (m->dm == 0) {
                const char *p = memchr(d + i, '\r', len - i);
                size_t run = p ? (size_t)(p - (d + i)) : len - i;
                if (body && emit(m, d + i, run, err))
                    return -1;
                i += run;
                if (p) {
                    m->dm = 1;
                    i++;
                }
                break;
            }
            char c = d[i];
            if (c == m->delim[m->dm]) {
                m->dm++;
                i++;
                if (m->dm == m->dlen) {
                    m->dm = 0;
                    if (body && m->cb.on_part_end && m->cb.on_part_end(m->user, &m->part, err) != 0)
                        return cb_fail(m, err);
                    m->st = ST_AFTER_DELIM;
                    m->lwsp = 0;
                }
            } else {
                /* the bytes held were the delimiter's prefix: they are content */
                if (body && emit(m, m->delim, m->dm, err))
                    return -1;
                if (c == '\r') {
                    m->dm = 1;
                    i++;
                } else {
                    m->dm = 0;
                }
            }
            break;
        }
        case ST_AFTER_DELIM: {
            char c = d[i++];
            if (c == '-' && m->lwsp == 0)
                m->st = ST_CLOSE_DASH;
            else if (c == ' ' || c == '\t') {
                if (++m->lwsp > 64)
                    return fail(m, err, "too much padding after a multipart boundary");
            } else if (c == '\r')
                m->st = ST_AFTER_DELIM_CR;
            else
                return fail(m, err, "unexpected byte after a multipart boundary (expected CRLF or \"--\")");
            break;
        }
        case ST_AFTER_DELIM_CR:
            if (d[i++] != '\n')
                return fail(m, err, "multipart boundary line must end with CRLF");
            if (begin_headers(m, err))
                return -1;
            break;
        case ST_CLOSE_DASH:
            if (d[i++] != '-')
                return fail(m, err, "unexpected byte after a multipart boundary (expected CRLF or \"--\")");
            m->st = ST_EPILOGUE;
            break;
        case ST_HEADERS: {
            unsigned char c = (unsigned char)d[i++];
            if (++m->hbytes > m->lim.max_header_bytes)
                return fail(m, err, "multipart part %d: headers larger than %zu bytes", m->part.index,
                            m->lim.max_header_bytes);
            if (c == '\n') {
                if (m->line_len == 0 || m->line[m->line_len - 1] != '\r')
                    return fail(m, err, "multipart part %d: header lines must end with CRLF", m->part.index);
                m->line_len--;
                if (m->line_len == 0) {
                    if (!m->has_disp)
                        return fail(m, err, "multipart part %d: no Content-Disposition header", m->part.index);
                    if (m->cb.on_part_begin && m->cb.on_part_begin(m->user, &m->part, err) != 0)
                        return cb_fail(m, err);
                    m->st = ST_BODY;
                    m->dm = 0;
                    break;
                }
                m->line[m->line_len] = 0;
                if (header_line(m, err))
                    return -1;
                m->line_len = 0;
                break;
            }
            if (c == '\r' && m->line_len && m->line[m->line_len - 1] == '\r')
                return fail(m, err, "multipart part %d: bare CR in headers", m->part.index);
            if ((c < 0x20 && c != '\t' && c != '\r') || c == 0x7f)
                return fail(m, err, "multipart part %d: control character in headers", m->part.index);
            if (m->line_len && m->line[m->line_len - 1] == '\r')
                return fail(m, err, "multipart part %d: bare CR in headers", m->part.index);
            m->line[m->line_len++] = (char)c;
            break;
        }
        case ST_EPILOGUE:
            return 0; /* ignored */
        case ST_ERROR:
            return lg_fail(err, "%s", m->errmsg);
        }
    }
    return 0;
}

int lg_multipart_finish(lg_multipart *m, lg_err *err)
{
    switch (m->st) {
    case ST_EPILOGUE: return 0;
    case ST_ERROR: return lg_fail(err, "%s", m->errmsg);
    case ST_PREAMBLE: return fail(m, err, "multipart body without any boundary line");
    default: return fail(m, err, "multipart body ended before its closing boundary");
    }
}

/* ---- file sink ---------------------------------------------------------------- */

int lg_file_sink_init(lg_file_sink *s, int fd, size_t max_bytes, lg_err *err)
{
    memset(s, 0, sizeof *s);
    s->fd = fd;
    s->max_bytes = max_bytes;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(c);
        return lg_fail(err, "SHA-256 init failed");
    }
    s->sha = c;
    return 0;
}

int lg_file_sink_write(lg_file_sink *s, const void *data, size_t len, lg_err *err)
{
    if (s->max_bytes && s->bytes + len > s->max_bytes)
        return lg_fail(err, "file larger than %zu bytes", s->max_bytes);
    if (EVP_DigestUpdate(s->sha, data, len) != 1)
        return lg_fail(err, "SHA-256 update failed");
    const char *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(s->fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return lg_fail(err, "write failed: %s", strerror(errno));
        }
        p += w;
        left -= (size_t)w;
    }
    s->bytes += len;
    return 0;
}

int lg_file_sink_finish(lg_file_sink *s, uint8_t *digest, char *hex, lg_err *err)
{
    uint8_t d[32];
    unsigned int n = 0;
    int ok = EVP_DigestFinal_ex(s->sha, d, &n) == 1 && n == 32;
    EVP_MD_CTX_free(s->sha);
    s->sha = NULL;
    if (!ok)
        return lg_fail(err, "SHA-256 final failed");
    if (digest)
        memcpy(digest, d, 32);
    if (hex) {
        for (int i = 0; i < 32; i++)
            sprintf(hex + 2 * i, "%02x", d[i]);
        hex[64] = 0;
    }
    return 0;
}

void lg_file_sink_discard(lg_file_sink *s)
{
    EVP_MD_CTX_free(s->sha);
    s->sha = NULL;
}
