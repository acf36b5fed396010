/*
 * khash.h — a stand-in for klib's khash.h, which <h2o/http2_internal.h>
 * includes but Debian's libh2o-evloop-dev does not ship. Only
 * gateway/http/conn.c sees it (CMakeLists.txt puts this folder on that one
 * file's quote-include path).
 *
 * It declares the hash-table type that header names, as an opaque struct
 * (the connection holds only a pointer to it, so h2o's struct layouts are
 * unchanged). The one inline function of that header that reads the table,
 * h2o_http2_conn_get_stream, cannot work with it: a call fails to link
 * (lg__khash_not_available is never defined). conn.c finds streams by
 * walking the connection's priority tree instead.
 */
#ifndef LG_H2O_COMPAT_KHASH_H
#define LG_H2O_COMPAT_KHASH_H

typedef unsigned int khint_t;
typedef khint_t khiter_t;

#define KHASH_MAP_INIT_INT64(name, khval_t) typedef struct kh_##name##_s kh_##name##_t;
#define khash_t(name) kh_##name##_t

khint_t lg__khash_not_available(void);
#define kh_get(name, h, k) ((void)(h), (void)(k), lg__khash_not_available())
#define kh_end(h) ((void)(h), (khint_t)0)
#define kh_val(h, x) ((void)(h), (void)(x), (h2o_http2_stream_t *)0)

#endif
