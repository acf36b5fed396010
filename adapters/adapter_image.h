/*
 * adapter_image.h — an adapter's identity and page layout (its *spec*),
 * and the filling of its host image.
 *
 * A spec is made once per adapter version when it is registered, on any
 * thread: for a PEFT directory it reads and validates the files
 * (adapters/peft.h), records their SHA-256 digest and the module shapes,
 * and drops the weights; for a synthetic adapter (benchmarks) it needs only
 * rank, targets and a seed. From the shapes it computes the page layout:
 * each (layer, module) has A [rank, in] and B [out, rank] at the adapter's
 * own rank (never padded), placed first-fit into pages of page_bytes,
 * 256-byte aligned, never straddling a page. The layout is the same in the
 * host tier and in the unified pool, so a page is copied as one block.
 *
 * The image is filled later by the loader thread (adapters/adapter_loader.h)
 * into host pages: the directory is read again and must still have the
 * registered digest (a changed file is an error, never silently served);
 * a synthetic adapter's values are generated from its seed (the same seed
 * gives the same bytes). Values are converted to the compute dtype.
 *
 * Tensor parallelism (geom.tp = N >= 2 ranks; engine/model/model_tp.c): the
 * image is N shards, S-LoRA's split. Modules of column-parallel layers (q, k,
 * v, gate, up: their output rows are split over the ranks) keep A [rank, in]
 * whole (the shrink runs on the replicated input) and split B by rows, rank
 * r's [out / N] block; modules of row-parallel layers (o, down: their input
 * is split) split A by columns, rank r's [rank, in / N] block, and keep B
 * whole (the partial expands are summed by the layer's all-reduce). Every
 * rank's shard has the same shapes, so one layout (in_dim / out_dim are a
 * shard's) serves all: the host image holds N * n_pages pages, rank r's
 * shard at pages [r * n_pages, (r + 1) * n_pages), and the pool holds
 * n_pages page ids that mean rank r's arena on rank r. No padding; every
 * rank and target module. A synthetic adapter's shards are slices of the
 * values it has unsharded (values are a function of their index), so a
 * sharded model computes what the unsharded one does.
 *
 * A spec is immutable after creation and may be read from any thread.
 */
#ifndef LG_ADAPTER_IMAGE_H
#define LG_ADAPTER_IMAGE_H

#include "engine/backend/backend.h"
#include "engine/base/common.h"
#include "engine/model/model_config.h"

/* What an adapter's pages are laid out for. */
typedef struct lg_adapter_geom {
    lg_model_config cfg;
    int max_rank;            /* largest rank accepted */
    lg_dtype dt;             /* compute dtype of the image */
    size_t page_bytes;       /* a multiple of 256, >= the largest tensor at max_rank */
    int tp;                  /* tensor-parallel ranks the image is sharded over (0 or 1: none) */
} lg_adapter_geom;

/* Whether LoRA module m's layer is row-parallel (o, down: A split by columns) rather than
 * column-parallel (q, k, v, gate, up: B split by rows) under tensor parallelism. */
static inline bool lg_lora_module_row_parallel(int m) { return m == 3 || m == 6; }

/* A synthetic adapter: random weights from a seed (benchmarks). targets:
 * bit m set for LoRA module m (q, k, v, o, gate, up, down). */
typedef struct lg_synth_adapter {
    int rank;
    unsigned targets;
    uint64_t seed;
    float alpha;             /* scale = alpha / rank; 0: alpha = 2 * rank */
} lg_synth_adapter;

typedef struct lg_adapter_place {
    int page;                /* index into the adapter's own pages */
    size_t off;              /* byte offset inside that page */
} lg_adapter_place;

typedef struct lg_adapter_spec {
    char *name;
    char *dir;               /* NULL for a synthetic adapter */
    lg_synth_adapter synth;
    char digest[65];
    lg_adapter_geom geom;
    int n_slots;             /* n_layers * LG_LORA_N_MODULES */
    int32_t *rank;           /* [n_slots] 0 = not adapted */
    float *scale;            /* [n_slots] */
    int32_t *in_dim, *out_dim; /* [n_slots]: a shard's (the module's with tp 1) */
    lg_adapter_place *pa, *pb; /* [n_slots] */
    int n_pages;             /* pages of one shard (of the image with tp 1); the pool holds this many */
    int tp;                  /* shards (geom.tp, at least 1): the host image is tp * n_pages pages */
    size_t *page_used;       /* [n_pages] bytes used per page */
    int max_rank;            /* largest module rank */
    size_t weight_bytes;     /* A and B in the compute dtype, no padding */
} lg_adapter_spec;

/* Largest single adapter tensor at max_rank for this model, in bytes of dt:
 * the unified pool's pages must be at least this large. */
size_t lg_adapter_max_tensor_bytes(const lg_model_config *cfg, int max_rank, lg_dtype dt);

int lg_adapter_spec_from_dir(const lg_adapter_geom *g, const char *name, const char *dir, lg_adapter_spec **out,
                             lg_err *err);
int lg_adapter_spec_synthetic(const lg_adapter_geom *g, const char *name, const lg_synth_adapter *s,
                              lg_adapter_spec **out, lg_err *err);
void lg_adapter_spec_free(lg_adapter_spec *s); /* NULL is a no-op */

/* Fills the image into pages[0 .. s->tp * s->n_pages), each page_bytes of host memory (bytes
 * beyond page_used[p % n_pages] are left alone): shard r into pages [r * n_pages, ...).
 * Thread-safe. */
int lg_adapter_image_fill(const lg_adapter_spec *s, unsigned char *const *pages, lg_err *err);

#endif
