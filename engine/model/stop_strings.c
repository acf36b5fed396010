/*
 * stop_strings.c — see stop_strings.h. Keeps a buffer of unreleased text;
 * after each push it searches the buffer for any stop string, and otherwise
 * holds back the longest suffix that is a proper prefix of some stop
 * string. Held-back text is at most max(len(stop)) - 1 bytes, so the work
 * per piece is small.
 */
#include "engine/model/stop_strings.h"

#include <stdlib.h>

struct lg_stopper {
    char **stops;
    size_t *lens;
    int n;
    char *buf;      /* pending text */
    size_t len, cap;
    char *out;      /* returned text */
    size_t out_cap;
    bool matched;
};

lg_stopper *lg_stopper_new(const char *const *stops, int n)
{
    lg_stopper *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->stops = calloc((size_t)(n > 0 ? n : 1), sizeof(char *));
    s->lens = calloc((size_t)(n > 0 ? n : 1), sizeof(size_t));
    if (!s->stops || !s->lens) {
        lg_stopper_free(s);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0])
            continue;
        s->stops[s->n] = strdup(stops[i]);
        if (!s->stops[s->n]) {
            lg_stopper_free(s);
            return NULL;
        }
        s->lens[s->n++] = strlen(stops[i]);
    }
    return s;
}

void lg_stopper_free(lg_stopper *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++) free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->buf);
    free(s->out);
    free(s);
}

static int ensure(char **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    char *np = realloc(*p, c);
    if (!np)
        return -1;
    *p = np;
    *cap = c;
    return 0;
}

/* Moves buf[0, n) to out, keeps the rest in buf. */
static const char *release(lg_stopper *s, size_t n, size_t *len)
{
    if (ensure(&s->out, &s->out_cap, n + 1) != 0) {
        *len = 0;
        return "";
    }
    memcpy(s->out, s->buf, n);
    s->out[n] = 0;
    memmove(s->buf, s->buf + n, s->len - n);
    s->len -= n;
    *len = n;
    return s->out;
}

const char *lg_stopper_push(lg_stopper *s, const char *piece, size_t n, size_t *len, bool *matched)
{
    *len = 0;
    *matched = s->matched;
    if (s->matched)
        return "";
    if (ensure(&s->buf, &s->cap, s->len + n + 1) != 0)
        return "";
    memcpy(s->buf + s->len, piece, n);
    s->len += n;
    if (s->n == 0)
        return release(s, s->len, len);
    /* earliest full match */
    size_t best = (size_t)-1;
    for (int i = 0; i < s->n; i++) {
        if (s->lens[i] > s->len)
            continue;
        for (size_t p = 0; p + s->lens[i] <= s->len; p++)
            if (!memcmp(s->buf + p, s->stops[i], s->lens[i])) {
                if (p < best)
                    best = p;
                break;
            }
    }
    if (best != (size_t)-1) {
        s->matched = true;
        *matched = true;
        const char *r = release(s, best, len);
        s->len = 0;
        return r;
    }
    /* hold back the longest suffix that is a prefix of a stop string */
    size_t hold = 0;
    for (int i = 0; i < s->n; i++) {
        size_t maxk = s->lens[i] - 1 < s->len ? s->lens[i] - 1 : s->len;
        for (size_t k = maxk; k > hold; k--)
            if (!memcmp(s->buf + s->len - k, s->stops[i], k)) {
                hold = k;
                break;
            }
    }
    return release(s, s->len - hold, len);
}

const char *lg_stopper_flush(lg_stopper *s, size_t *len)
{
    if (s->matched) {
        *len = 0;
        return "";
    }
    return release(s, s->len, len);
}
