/*
 * strmap.h — a small string -> pointer hash map (separate chaining, FNV-1a,
 * power-of-two buckets that double at load factor 1). Keys are copied.
 * Used for tenant and adapter-name tables: thousands of entries, looked up
 * once per request. Not thread-safe; callers lock.
 */
#ifndef LG_STRMAP_H
#define LG_STRMAP_H

#include <stdbool.h>
#include <stddef.h>

typedef struct lg_strmap lg_strmap;

lg_strmap *lg_strmap_new(void);
void lg_strmap_free(lg_strmap *m); /* NULL is a no-op; values are not freed */
void *lg_strmap_get(const lg_strmap *m, const char *key);
/* Sets key -> val (replacing); -1 when out of memory. */
int lg_strmap_put(lg_strmap *m, const char *key, void *val);
/* Removes key; returns its value or NULL. */
void *lg_strmap_del(lg_strmap *m, const char *key);
size_t lg_strmap_count(const lg_strmap *m);
/* Calls fn for every entry (no insert/delete during the walk). */
void lg_strmap_each(const lg_strmap *m, void (*fn)(void *ctx, const char *key, void *val), void *ctx);

#endif
