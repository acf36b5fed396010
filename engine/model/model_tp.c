/*
 * model_tp.c — tensor parallelism: one model over N ranks of one host
 * (N devices, or N CPU backends in tests), Megatron's split with S-LoRA's
 * split of the adapters.
 *
 * The split. Each rank holds 1/N of the attention heads and KV heads and
 * 1/N of the MLP's features: the column-parallel layers (q, k, v, gate, up)
 * keep a block of output rows, so a rank computes its own heads' q, k, v,
 * their attention over its own KV heads (its KV pages hold only those), and
 * its own features of silu(gate) * up; the row-parallel layers (o, down)
 * keep the matching block of input columns, so each rank has a partial sum
 * of the output, and one all-reduce after each (two a layer) gives every
 * rank the whole residual stream. Embedding, norms and the LM head are
 * replicated; only rank 0 computes the logits and samples. LoRA adds no
 * communication: a column-parallel module's shrink runs on the replicated
 * input with the whole A and its expand with the rank's rows of B; a
 * row-parallel module's shrink runs on the rank's input columns with its
 * columns of A, and the expand with the whole B adds a partial that the
 * layer's all-reduce sums with the base output (adapter_image.h: the
 * shards). Every rank and target module, no padding.
 *
 * Memory. The pool spans the ranks (page_pool.h lg_page_pool_create_ranks):
 * page p means the same slot on every rank, so the scheduler, the prefix
 * cache and the adapter cache keep one page table, and the pool and the
 * prefix cache are consistent across ranks by construction. The adapter
 * cache keeps one slot table a rank, each naming that rank's arena (a
 * step's sequence carries rank 0's; rank r reads the one r tables on).
 * Adapters uploaded at run time reach every rank before any request uses
 * them: the adapter cache copies every shard and reports the adapter
 * resident only when all copies are done.
 *
 * Threads. Rank 0 is the caller's model (the engine thread drives it as it
 * drives a single-device model); ranks 1..N-1 each get a thread that
 * binds its backend (CUDA: its device), creates its model (weights uploaded
 * in parallel) and then waits for steps. lg_model_launch on rank 0 checks
 * the step, hands it to the other threads, enqueues its own part and
 * returns once every rank has enqueued its part; the all-reduces order the
 * ranks' streams. Tokens a chained decode step takes from the previous
 * step's sampler (rank 0's) reach the others through an all-reduce of the
 * ids (zeros elsewhere). Step graphs record each rank's step with its
 * all-reduces (CUDA: NCCL calls captured).
 *
 * Limits. N must divide the heads, the KV heads and the MLP features (no
 * replication of KV heads yet: refused by name). The LM head runs on rank
 * 0 only (a vocabulary split would cut its bytes by N). A backend failure
 * on one rank after a step was handed out leaves the others waiting in
 * their next all-reduce (CPU) or hangs the communicator (NCCL): the
 * engine then fails the step and stops; it does not recover the group.
 */
#include "engine/model/model_tp.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TP_MAX 16

typedef struct rank_thread {
    lg_tp *tp;
    int rank;
    lg_backend *be;
    lg_model *m;
    pthread_t th;
    bool started;
} rank_thread;

struct lg_tp {
    int n;
    const lg_weights *w;       /* during creation only */
    const lg_model_opts *opts;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;              /* steps handed out */
    int pending;               /* ranks that have not finished the current step (or their creation) */
    bool stop;
    lg_page_pool *pool;        /* the current step */
    const lg_step_seq *seqs;
    int n_seqs;
    int rc;                    /* the first failure of the current step, and its message */
    lg_err err;
    rank_thread r[TP_MAX];
};

static void rank_done(lg_tp *tp, int rc, const lg_err *err)
{
    pthread_mutex_lock(&tp->mu);
    if (rc != 0 && tp->rc == 0) {
        tp->rc = rc;
        tp->err = *err;
    }
    tp->pending--;
    pthread_cond_broadcast(&tp->done);
    pthread_mutex_unlock(&tp->mu);
}

static void *rank_main(void *arg)
{
    rank_thread *rt = arg;
    lg_tp *tp = rt->tp;
    lg_err err = {0};
    int rc = rt->be->i.bind_thread ? rt->be->i.bind_thread(rt->be) : 0;
    if (rc != 0)
        lg_fail(&err, "rank %d: cannot bind its backend to its thread", rt->rank);
    else
        rc = lg_model_create_rank(rt->be, tp->w, tp->opts, rt->rank, tp->n, &rt->m, &err);
    if (rc != 0)
        lg_err_prefix(&err, "tensor-parallel rank %d", rt->rank);
    rank_done(tp, rc, &err);
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&tp->mu);
        while (!tp->stop && tp->gen == seen)
            pthread_cond_wait(&tp->go, &tp->mu);
        if (tp->stop) {
            pthread_mutex_unlock(&tp->mu);
            break;
        }
        seen = tp->gen;
        lg_page_pool *pool = tp->pool;
        const lg_step_seq *seqs = tp->seqs;
        const int n_seqs = tp->n_seqs;
        pthread_mutex_unlock(&tp->mu);
        rc = rt->m ? lg_model_launch_peer(rt->m, pool, seqs, n_seqs, &err) : -1;
        if (rc != 0)
            lg_err_prefix(&err, "tensor-parallel rank %d", rt->rank);
        rank_done(tp, rc, &err);
    }
    return NULL;
}

int lg_tp_post(lg_tp *tp, lg_page_pool *pool, const lg_step_seq *seqs, int n_seqs)
{
    pthread_mutex_lock(&tp->mu);
    tp->pool = pool;
    tp->seqs = seqs;
    tp->n_seqs = n_seqs;
    tp->rc = 0;
    tp->pending = tp->n - 1;
    tp->gen++;
    pthread_cond_broadcast(&tp->go);
    pthread_mutex_unlock(&tp->mu);
    return 0;
}

int lg_tp_wait(lg_tp *tp, lg_err *err)
{
    pthread_mutex_lock(&tp->mu);
    while (tp->pending > 0)
        pthread_cond_wait(&tp->done, &tp->mu);
    const int rc = tp->rc;
    if (rc != 0)
        *err = tp->err;
    pthread_mutex_unlock(&tp->mu);
    return rc;
}

void lg_tp_free(lg_tp *tp)
{
    if (!tp)
        return;
    pthread_mutex_lock(&tp->mu);
    tp->stop = true;
    pthread_cond_broadcast(&tp->go);
    pthread_mutex_unlock(&tp->mu);
    for (int r = 1; r < tp->n; r++)
        if (tp->r[r].started)
            pthread_join(tp->r[r].th, NULL);
    for (int r = 1; r < tp->n; r++) {
        if (tp->r[r].m && tp->r[r].be->i.bind_thread)
            tp->r[r].be->i.bind_thread(tp->r[r].be);
        lg_model_free(tp->r[r].m);
    }
    if (tp->n > 1 && tp->r[0].be->i.bind_thread)
        tp->r[0].be->i.bind_thread(tp->r[0].be);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->go);
    pthread_cond_destroy(&tp->done);
    free(tp);
}

int lg_model_create_tp(lg_backend *const *bes, int n, const lg_weights *w, const lg_model_opts *opts,
                       lg_model **out, lg_err *err)
{
    *out = NULL;
    if (n <= 1)
        return lg_model_create(bes[0], w, opts, out, err);
    if (n > TP_MAX)
        return lg_fail(err, "tensor parallelism over %d ranks: at most %d", n, TP_MAX);
    const lg_model_config *c = lg_weights_config(w);
    if (c->n_heads % n || c->n_kv_heads % n || c->d_ff % n)
        return lg_fail(err,
                       "tensor parallelism over %d ranks: the model's %d attention heads, %d KV heads and %d MLP "
                       "features must each divide by %d (KV-head replication is not implemented)",
                       n, c->n_heads, c->n_kv_heads, c->d_ff, n);
    for (int r = 0; r < n; r++)
        if (!bes[r]->i.all_reduce || !bes[r]->i.group_init || strcmp(bes[r]->i.name, bes[0]->i.name) != 0)
            return lg_fail(err, "tensor parallelism: rank %d's backend (%s) cannot join a group of %s backends", r,
                           bes[r]->i.name, bes[0]->i.name);
    if (bes[0]->i.group_init(bes, n, err) != 0)
        return -1;
    if (bes[0]->i.bind_thread && bes[0]->i.bind_thread(bes[0]) != 0) /* rank 0's model is made on this thread */
        return lg_fail(err, "tensor parallelism: cannot bind rank 0's backend to this thread");
    lg_tp *tp = calloc(1, sizeof *tp);
    if (!tp)
        return lg_fail(err, "out of memory");
    tp->n = n;
    tp->w = w;
    tp->opts = opts;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->go, NULL);
    pthread_cond_init(&tp->done, NULL);
    for (int r = 0; r < n; r++)
        tp->r[r] = (rank_thread){.tp = tp, .rank = r, .be = bes[r]};
    /* ranks 1..n-1 create their models on their own threads while rank 0 does on this one */
    tp->pending = n - 1;
    int rc = 0;
    for (int r = 1; r < n; r++) {
        if (pthread_create(&tp->r[r].th, NULL, rank_main, &tp->r[r]) != 0) {
            pthread_mutex_lock(&tp->mu);
            tp->pending -= n - r;
            pthread_mutex_unlock(&tp->mu);
            rc = lg_fail(err, "tensor parallelism: cannot start rank %d's thread", r);
            break;
        }
        tp->r[r].started = true;
    }
    lg_model *m0 = NULL;
    if (rc == 0)
        rc = lg_model_create_rank(bes[0], w, opts, 0, n, &m0, err);
    lg_err perr;
    const int prc = lg_tp_wait(tp, &perr);
    if (rc == 0 && prc != 0)
        rc = lg_fail(err, "%s", perr.msg);
    tp->w = NULL;
    tp->opts = NULL;
    if (rc != 0) {
        lg_model_free(m0);
        lg_tp_free(tp);
        return -1;
    }
    tp->r[0].m = m0;
    lg_model_attach_tp(m0, tp);
    *out = m0;
    return 0;
}
