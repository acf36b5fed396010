/*
 * store_writer.h — the store's writer handle (db/store.h lg_store_open),
 * one at a time. Every database write of the management APIs (tenants,
 * keys, pricing, adapters) runs on the worker pool while holding it; so
 * does installing an adapter in the engine after its commit, so that two
 * replaces of one name install in commit order. Never taken on a loop
 * thread: SQLite waits for fsync under it.
 */
#ifndef LG_GW_STORE_WRITER_H
#define LG_GW_STORE_WRITER_H

#include "db/store.h"

typedef struct lg_store_writer lg_store_writer;

/* Takes ownership of st (closed by lg_store_writer_free). */
int lg_store_writer_create(lg_store *st, lg_store_writer **out, lg_err *err);
void lg_store_writer_free(lg_store_writer *w); /* NULL: no-op; closes the store */

/* The handle, exclusively until lg_store_writer_release. [worker] */
lg_store *lg_store_writer_acquire(lg_store_writer *w);
void lg_store_writer_release(lg_store_writer *w);

#endif
