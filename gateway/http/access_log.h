/*
 * access_log.h — the structured access log: one JSON object per line per
 * finished request, written by its own thread so loop threads never wait on
 * the disk or a slow stderr.
 *
 * A line carries what an operator needs to see traffic and nothing a client
 * would not want stored: time, request id, method, path (no query string),
 * route name, status, protocol, durations, bytes, tenant slug, peer address,
 * whether the client left early, and the fields route code added
 * (lg_request_log_set: key id, model, token counts). Never the body (no
 * prompt text), never a header value (no keys).
 *
 * Workload: one line per request (~300 bytes), tens of thousands per second
 * at most. Writers append under a mutex to a buffer (a memcpy); the thread
 * writes the buffer out every 100 ms or when it passes 64 KiB. Above 8 MiB
 * pending (the sink is stuck) new lines are dropped and counted; the
 * count is reported on the next line that fits and at close.
 */
#ifndef LG_GW_ACCESS_LOG_H
#define LG_GW_ACCESS_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "engine/base/common.h"

typedef struct lg_access_log lg_access_log;

/* path: "-" for stderr, else a file opened for append (created 0600). */
int lg_access_log_open(const char *path, lg_access_log **out, lg_err *err);
/* [any] Queues line (no newline; one is added). Never blocks on I/O. */
void lg_access_log_write(lg_access_log *log, const char *line, size_t len);
uint64_t lg_access_log_dropped(lg_access_log *log);
/* Writes what is pending, stops the thread, closes the file. NULL: no-op. */
void lg_access_log_close(lg_access_log *log);

#endif
