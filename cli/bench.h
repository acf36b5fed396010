/*
 * bench.h — the pieces of `loragate bench` shared by its files:
 * cmd_bench.c (options, setup, the fixed-batch and adapter-load modes) and
 * bench_workload.c (serving workloads: arrivals, popularity, prefixes,
 * tenants, latency percentiles, goodput; and the helpers both modes use).
 * Calls point one way: cmd_bench.c -> bench_workload.c; everything declared
 * here is defined in bench_workload.c.
 */
#ifndef LG_BENCH_H
#define LG_BENCH_H

#include "engine/runtime/dp_router.h"

#include <stdio.h>

#define BENCH_MAX_RANKS 8
#define BENCH_MAX_TENANTS 64

typedef struct bench_opts {
    const char *model, *backend, *targets, *workload, *trace, *popularity;
    bool dummy, json, progress;
    int num_seqs, prompt_len, output_len, adapters, threads, budget, max_seqs;
    int ranks[BENCH_MAX_RANKS], n_ranks;          /* --rank or --rank-mix */
    lg_dtype dtype;
    lg_qtype quantize; /* --quantization fp8|int4 (LG_QNONE: weights as stored) */
    uint64_t seed;
    lg_sampling_params sampling;                  /* --temperature, --top-k, --top-p, --min-p (default greedy) */
    float presence_penalty, frequency_penalty;    /* --presence-penalty, --frequency-penalty */
    int logprobs;                                 /* --logprobs N: each token's logprob + N alternatives; -1 off */
    /* serving workloads */
    int requests, clients;
    double rate;                                  /* Poisson arrivals per second */
    int prompt_min, prompt_max, output_min, output_max;
    int prefix_len;                               /* shared (per-tenant) prefix */
    double prefix_frac;
    int tenants;
    double tenant_weights[BENCH_MAX_TENANTS], tenant_share[BENCH_MAX_TENANTS];
    double slo_ttft_ms, slo_tpot_ms;
    lg_sched_policy policy;
    lg_prefix_sharing sharing;
    int pool_mb, adapter_host_mb, ctx;
    bool kv_fp8;                                  /* --kv-cache-dtype fp8 */
    double gpu_util;
    bool adapter_load_test;
    int warmup;
    int settle_ms; /* fixed batch: idle after the warm-up, before the measured batch */
    /* fixed batch: --json-schemas FILE (a JSON array of schemas): request k's output follows schema k % n,
     * compiled for the model's tokenizer or --schema-tokenizer's (a tokenizer.json, for dummy weights) */
    const char *json_schemas, *schema_tokenizer;
    lg_constraint **constraints;
    int n_constraints;
    lg_spec_opts spec; /* --speculative ... (engine/runtime/speculate.c) */
    const char *draft_model; /* --draft-model (with --load-format dummy: random weights too) */
    int dp, tp;              /* --data-parallel-size (workloads), --tensor-parallel-size */
} bench_opts;

/* Serving workload mode (--workload poisson|closed|burst|trace), on the engines behind dp (be: engine 0's
 * backend, for the report). */
int bench_run_workload(lg_dp *dp, lg_backend *be, const bench_opts *o, const int *adapter_ids, lg_err *err);

/* The request's sampling: o->sampling, seeded per request i, and o's penalties. */
void bench_sampling(const bench_opts *o, uint64_t i, lg_request_params *rp);

/* p-th percentile (0..100) of v[0..n) by linear interpolation; sorts v. 0 if n == 0. */
double bench_percentile(double *v, int n, double p);

#endif
