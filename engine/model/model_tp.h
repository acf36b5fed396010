/*
 * model_tp.h — tensor parallelism between engine/model/model.c and
 * engine/model/model_tp.c (not a public header; lg_model_create_tp in
 * model.h is the entry point).
 */
#ifndef LG_MODEL_TP_H
#define LG_MODEL_TP_H

#include "engine/model/model.h"

typedef struct lg_tp lg_tp;

/* model.c: one rank's model (the rank's shard of the weights; tp_size 1: the whole model). */
int lg_model_create_rank(lg_backend *be, const lg_weights *w, const lg_model_opts *opts, int tp_rank, int tp_size,
                         lg_model **out, lg_err *err);
/* model.c: rank 0 drives tp (its lg_model_launch posts each step to the other ranks; lg_model_free
 * stops and frees them). */
void lg_model_attach_tp(lg_model *m, lg_tp *tp);
/* model.c: a rank > 0's part of a step rank 0 launched with the same seqs: the same forward on its
 * shard, no logits, no sampling. */
int lg_model_launch_peer(lg_model *m, lg_page_pool *pool, const lg_step_seq *seqs, int n_seqs, lg_err *err);

/* model_tp.c, called by rank 0's model: hands the step to every other rank's thread, then waits until
 * each has enqueued it (seqs are read until then); 0, or -1 with the first rank's error. */
int lg_tp_post(lg_tp *tp, lg_page_pool *pool, const lg_step_seq *seqs, int n_seqs);
int lg_tp_wait(lg_tp *tp, lg_err *err);
/* Stops the ranks' threads and frees their models (rank 0's lg_model_free). */
void lg_tp_free(lg_tp *tp);

#endif
