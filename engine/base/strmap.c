/*
 * strmap.c — see strmap.h.
 */
#include "engine/base/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    struct slot *next;
    uint64_t h;
    void *val;
    char key[];
} slot;

struct lg_strmap {
    slot **b;
    size_t nb, n;
};

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

lg_strmap *lg_strmap_new(void)
{
    lg_strmap *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->nb = 16;
    m->b = calloc(m->nb, sizeof *m->b);
    if (!m->b) {
        free(m);
        return NULL;
    }
    return m;
}

void lg_strmap_free(lg_strmap *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->nb; i++)
        for (slot *s = m->b[i], *n; s; s = n) {
            n = s->next;
            free(s);
        }
    free(m->b);
    free(m);
}

static slot **find(const lg_strmap *m, const char *key, uint64_t h)
{
    slot **pp = &m->b[h & (m->nb - 1)];
    while (*pp && ((*pp)->h != h || strcmp((*pp)->key, key)))
        pp = &(*pp)->next;
    return pp;
}

void *lg_strmap_get(const lg_strmap *m, const char *key)
{
    slot *s = *find(m, key, fnv(key));
    return s ? s->val : NULL;
}

int lg_strmap_put(lg_strmap *m, const char *key, void *val)
{
    uint64_t h = fnv(key);
    slot **pp = find(m, key, h);
    if (*pp) {
        (*pp)->val = val;
        return 0;
    }
    size_t kl = strlen(key);
    slot *s = malloc(sizeof *s + kl + 1);
    if (!s)
        return -1;
    s->h = h;
    s->val = val;
    memcpy(s->key, key, kl + 1);
    s->next = NULL;
    *pp = s;
    if (++m->n > m->nb) {
        size_t nb = m->nb * 2;
        slot **b = calloc(nb, sizeof *b);
        if (b) {
            for (size_t i = 0; i < m->nb; i++)
                for (slot *x = m->b[i], *n; x; x = n) {
                    n = x->next;
                    x->next = b[x->h & (nb - 1)];
                    b[x->h & (nb - 1)] = x;
                }
            free(m->b);
            m->b = b;
            m->nb = nb;
        }
    }
    return 0;
}

void *lg_strmap_del(lg_strmap *m, const char *key)
{
    slot **pp = find(m, key, fnv(key));
    slot *s = *pp;
    if (!s)
        return NULL;
    *pp = s->next;
    void *v = s->val;
    free(s);
    m->n--;
    return v;
}

size_t lg_strmap_count(const lg_strmap *m) { return m->n; }

void lg_strmap_each(const lg_strmap *m, void (*fn)(void *ctx, const char *key, void *val), void *ctx)
{
    for (size_t i = 0; i < m->nb; i++)
        for (slot *s = m->b[i]; s; s = s->next) fn(ctx, s->key, s->val);
}
