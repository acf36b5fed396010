/*
 * adapter_loader.h — the adapter loader thread: fills host images of
 * adapters (reads and validates the PEFT files again, or generates a
 * synthetic adapter) off the engine thread, so the engine thread only ever
 * starts host-to-device copies.
 *
 * The engine thread submits jobs (each names an immutable spec and the host
 * pages to fill, which it allocated and pinned in the host tier) and later
 * takes the finished ones; the loader calls `wake` after each finished job
 * so a sleeping engine thread notices. Jobs run one at a time in submission
 * order (a single thread: loads are memory-bound copies and conversions).
 *
 * Ownership: a job is the caller's memory; between submit and take_done the
 * loader uses it and the caller must not touch it (nor free the spec or the
 * pages it names). lg_loader_free waits for the running job, hands the
 * queued ones back unrun (status -1, "cancelled") through take_done's list
 * — the caller frees them.
 */
#ifndef LG_ADAPTER_LOADER_H
#define LG_ADAPTER_LOADER_H

#include "adapters/adapter_image.h"

typedef struct lg_load_job {
    int id;                         /* the caller's key */
    const lg_adapter_spec *spec;
    unsigned char **pages;          /* [spec->n_pages] host page addresses to fill */
    /* results, set by the loader */
    int status;                     /* 0 ok, -1 failed (error says why) */
    char error[256];
    double seconds;                 /* time spent filling */
    struct lg_load_job *next;       /* internal */
} lg_load_job;

typedef struct lg_loader lg_loader;

int lg_loader_create(void (*wake)(void *ctx), void *wake_ctx, lg_loader **out, lg_err *err);
/* Stops the thread (after its current job) and joins it. NULL is a no-op.
 * Call lg_loader_cancel_all and lg_loader_take_done first to get every job
 * back. */
void lg_loader_free(lg_loader *l);

void lg_loader_submit(lg_loader *l, lg_load_job *j);
/* Finished jobs since the last call, oldest first (linked by ->next), or NULL. */
lg_load_job *lg_loader_take_done(lg_loader *l);
/* Moves every queued (not started) job to the done list with status -1 and
 * waits for the running one to finish. */
void lg_loader_cancel_all(lg_loader *l);
/* Jobs submitted and not yet taken back. */
int lg_loader_pending(lg_loader *l);

#endif
