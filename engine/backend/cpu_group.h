/*
 * cpu_group.h — the CPU backend's tensor-parallel group (backend.h
 * group_init / all_reduce): ranks are CPU backends in one process, each
 * driven by its own thread, and an all-reduce is a sum through shared memory.
 *
 * How: each rank posts its buffer's address and waits at a barrier; then
 * rank r sums slice r of the elements over every rank's buffer (in rank
 * order 0, 1, ..., so every rank's result is the same bits) and writes the
 * sum back into slice r of every buffer; a second barrier ends the op. No
 * two ranks touch the same element, and nothing is copied twice.
 * 16-bit sums are rounded after each addition, as NCCL's are.
 *
 * Limits: a rank that stops calling (an op failed before the all-reduce)
 * leaves the others waiting at the barrier; the model checks a step's
 * shapes on every rank before the first op, so an op does not fail on one
 * rank alone. One group a backend.
 */
#ifndef LG_CPU_GROUP_H
#define LG_CPU_GROUP_H

#include "engine/backend/backend.h"

typedef struct lg_cpu_group lg_cpu_group;

/* A group of n ranks, with one reference a rank (lg_cpu_group_release). */
int lg_cpu_group_new(int n, lg_cpu_group **out, lg_err *err);
void lg_cpu_group_release(lg_cpu_group *g); /* the last reference frees it; NULL is a no-op */
/* Rank `rank`'s part of one all-reduce of x (contiguous; F32, F16, BF16 or I32). */
int lg_cpu_group_all_reduce(lg_cpu_group *g, int rank, lg_tensor x);

#endif
