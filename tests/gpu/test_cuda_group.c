/*
 * test_cuda_group.c — the CUDA backend's tensor-parallel group (kernels/group.cu, NCCL loaded at run time
 * by kernels/nccl.cu) on two GPUs: group_init, all_reduce from one thread a rank, all_reduce inside a step
 * graph, and the memory entry points of one rank's backend called from a thread whose device is the other's.
 *
 * Reference: the sum of the ranks' inputs computed on the host. The inputs are chosen so that every sum is
 * exact in its dtype, so results must equal it bit for bit: i32 and f32 hold integers in [-1000, 1000]; f16
 * and bf16 hold multiples of 0.25 in [-7.5, 7.5], whose sums of two (multiples of 0.25 up to 15) need 6
 * significant bits. Sizes 1, 7, 4096 (4 x 1024) and 1M (1024 x 1024) elements of each dtype.
 *
 * What it checks:
 *   - the slots exist; all_reduce outside a group leaves x as it was; group_init refuses one backend, the
 *     same device twice, and a backend already in a group;
 *   - from two threads (rank r bound with bind_thread, its current device then r's): every dtype and size,
 *     and the refusals of a strided view and of an fp8 dtype (no collective enqueued);
 *   - a step graph: graph_begin / all_reduce / scale_cap(2) / graph_end under one key, recorded once and
 *     replayed twice, with new inputs uploaded before each; the replays must say replayed and give 2 x sum;
 *   - from the main thread, bound to device 0: rank 1's alloc lands on device 1; upload (pageable, staged),
 *     download (pipelined through staging), copy, sync, mem_info (1 GiB allocated on rank 1 shows there and
 *     not on rank 0), alloc_host, upload_async / upload_done, download_async / download_wait, free_host,
 *     graph_reset, dealloc, and the current device is still 0 after each;
 *   - freeing rank 0 first, then rank 1, from the main thread, returns.
 * Fewer than 2 GPUs: prints SKIP and exits 0. NCCL that cannot be loaded is a failure (with the loader's
 * line). NCCL_NVLS_ENABLE is set to 0 unless set: the test needs no NVLink multicast.
 * Usage: test_cuda_group (tests/gpu/run_device.sh group). Exit status 0 only if every check passed.
 */
#include "engine/backend/backend.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

typedef struct {
    int pass, fail;
} tally;

#define CHECK(t, cond, ...)                                                                      \
    do {                                                                                         \
        if (cond) {                                                                              \
            (t)->pass++;                                                                         \
        } else {                                                                                 \
            (t)->fail++;                                                                         \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                          \
            printf(__VA_ARGS__);                                                                 \
            printf("\n");                                                                        \
        }                                                                                        \
    } while (0)
#define MUST(x)                                                                                  \
    do {                                                                                         \
        if (!(x)) {                                                                              \
            fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #x);                        \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static int cur_device(void)
{
    int d = -1;
    if (cudaGetDevice(&d) != cudaSuccess)
        return -1;
    return d;
}

/* rank r's input element i (salt: which buffer), exact in dt and so is the sum over two ranks */
static double value(lg_dtype dt, int r, int64_t i, int salt)
{
    if (dt == LG_F16 || dt == LG_BF16)
        return (double)((int)((i * 7 + r * 3 + salt) % 61) - 30) * 0.25;
    return (double)((int)(((uint64_t)i * 2654435761u + (uint64_t)r * 97 + (uint64_t)salt * 31) % 2001) - 1000);
}

/* host buffer of n elements of dt: rank r's inputs */
static void *make_input(lg_dtype dt, int r, int64_t n, int salt)
{
    void *h = malloc((size_t)n * lg_dtype_size(dt));
    MUST(h);
    if (dt == LG_I32) {
        for (int64_t i = 0; i < n; i++) ((int32_t *)h)[i] = (int32_t)value(dt, r, i, salt);
    } else {
        float *f = malloc((size_t)n * sizeof(float));
        MUST(f);
        for (int64_t i = 0; i < n; i++) f[i] = (float)value(dt, r, i, salt);
        lg_from_f32(h, dt, f, (size_t)n);
        free(f);
    }
    return h;
}

/* elements of got (n of dt) that differ from scale x the sum over the ranks; the first one into *first */
static int64_t mismatches(lg_dtype dt, const void *got, int64_t n, int ranks, int salt, double scale, int64_t *first)
{
    float *f = NULL;
    if (dt != LG_I32) {
        f = malloc((size_t)n * sizeof(float));
        MUST(f);
        lg_to_f32(f, got, dt, (size_t)n);
    }
    int64_t bad = 0;
    *first = -1;
    for (int64_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < ranks; r++) want += value(dt, r, i, salt);
        want *= scale;
        const double g = dt == LG_I32 ? (double)((const int32_t *)got)[i] : (double)f[i];
        if (g != want) {
            if (bad++ == 0)
                *first = i;
        }
    }
    free(f);
    return bad;
}

/* ---- one rank, on its own thread ---- */

typedef struct {
    lg_backend *be;
    int rank, ranks;
    void *graph_buf; /* named by the step graph: freed by main after graph_reset */
    tally t;
} rank_arg;

static const lg_dtype k_dts[4] = {LG_F32, LG_F16, LG_BF16, LG_I32};
static const int64_t k_shapes[4][2] = {{1, 1}, {1, 7}, {4, 1024}, {1024, 1024}};

static void *rank_main(void *p)
{
    rank_arg *a = p;
    lg_backend *be = a->be;
    tally *t = &a->t;
    CHECK(t, be->i.bind_thread(be) == 0, "rank %d: bind_thread failed", a->rank);
    CHECK(t, cur_device() == a->rank, "rank %d: current device after bind_thread is %d", a->rank, cur_device());

    /* every dtype and size; both ranks enqueue the same collectives in the same order */
    for (int di = 0; di < 4; di++)
        for (int si = 0; si < 4; si++) {
            const lg_dtype dt = k_dts[di];
            const int64_t rows = k_shapes[si][0], cols = k_shapes[si][1], n = rows * cols;
            const size_t bytes = (size_t)n * lg_dtype_size(dt);
            const int salt = di * 4 + si;
            void *h = make_input(dt, a->rank, n, salt);
            void *d = be->i.alloc(be, bytes);
            MUST(d);
            MUST(be->i.upload(be, d, h, bytes) == 0);
            const int rc = be->i.all_reduce(be, lg_tensor_2d(d, dt, rows, cols));
            CHECK(t, rc == 0, "rank %d: all_reduce %s [%lld x %lld] returned %d", a->rank, lg_dtype_name(dt),
                  (long long)rows, (long long)cols, rc);
            memset(h, 0xff, bytes);
            MUST(be->i.download(be, h, d, bytes) == 0);
            int64_t first;
            const int64_t bad = mismatches(dt, h, n, a->ranks, salt, 1.0, &first);
            CHECK(t, bad == 0, "rank %d: all_reduce %s of %lld elements: %lld differ from the host sum (first at %lld)",
                  a->rank, lg_dtype_name(dt), (long long)n, (long long)bad, (long long)first);
            be->i.dealloc(be, d);
            free(h);
        }

    /* refused without a collective: a strided view, an fp8 tensor */
    {
        void *d = be->i.alloc(be, 64 * 4);
        MUST(d);
        lg_tensor x = lg_tensor_2d(d, LG_F32, 4, 8);
        x.stride = 16;
        CHECK(t, be->i.all_reduce(be, x) != 0, "rank %d: all_reduce of a strided view was taken", a->rank);
        CHECK(t, be->i.all_reduce(be, lg_tensor_2d(d, LG_F8E4M3, 4, 8)) != 0,
              "rank %d: all_reduce of fp8 was taken", a->rank);
        be->i.dealloc(be, d);
    }

    /* a step graph holding the all-reduce: recorded once, replayed twice with new inputs */
    {
        const int64_t rows = 4, cols = 1024, n = rows * cols;
        const size_t bytes = (size_t)n * 4;
        void *d = be->i.alloc(be, bytes);
        MUST(d);
        a->graph_buf = d;
        static const char key[] = "test_cuda_group all_reduce";
        for (int k = 0; k < 3; k++) {
            const int salt = 100 + k;
            void *h = make_input(LG_F32, a->rank, n, salt);
            MUST(be->i.upload(be, d, h, bytes) == 0);
            bool replayed = false;
            int rc = be->i.graph_begin(be, key, sizeof key, &replayed);
            CHECK(t, rc == 0, "rank %d: graph_begin %d returned %d", a->rank, k, rc);
            CHECK(t, replayed == (k > 0), "rank %d: graph_begin %d: replayed=%d", a->rank, k, (int)replayed);
            if (!replayed) {
                const lg_tensor x = lg_tensor_2d(d, LG_F32, rows, cols);
                rc = be->i.all_reduce(be, x);
                CHECK(t, rc == 0, "rank %d: recorded all_reduce returned %d", a->rank, rc);
                rc = be->i.scale_cap(be, x, 2.0f, 0.0f);
                CHECK(t, rc == 0, "rank %d: recorded scale_cap returned %d", a->rank, rc);
            }
            rc = be->i.graph_end(be, true);
            CHECK(t, rc == 0, "rank %d: graph_end %d returned %d", a->rank, k, rc);
            memset(h, 0xff, bytes);
            MUST(be->i.download(be, h, d, bytes) == 0);
            int64_t first;
            const int64_t bad = mismatches(LG_F32, h, n, a->ranks, salt, 2.0, &first);
            CHECK(t, bad == 0, "rank %d: step graph %s %d: %lld of %lld differ from 2 x the host sum (first at %lld)",
                  a->rank, k ? "replay" : "recording", k, (long long)bad, (long long)n, (long long)first);
            free(h);
        }
    }
    CHECK(t, be->i.sync(be) == 0, "rank %d: sync failed", a->rank);
    return NULL;
}

/* ---- rank 1's memory entry points from the main thread (device 0) ---- */

static void fill_bytes(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 131u + seed * 17u + (i >> 12));
}

static void any_thread_checks(lg_backend *b0, lg_backend *b1, tally *t)
{
    const size_t n = 3 * MIB + 123; /* staged upload in pieces; download pipelined through staging */
    unsigned char *src = malloc(n), *dst = malloc(n);
    MUST(src && dst);
    fill_bytes(src, n, 1);

    void *p = b1->i.alloc(b1, n);
    CHECK(t, p != NULL, "alloc on rank 1 from device 0 failed");
    if (!p)
        return;
    struct cudaPointerAttributes at;
    memset(&at, 0, sizeof at);
    at.device = -1;
    CHECK(t, cudaPointerGetAttributes(&at, p) == cudaSuccess && at.device == 1,
          "rank 1's alloc from a device-0 thread is on device %d, expected 1", at.device);
    CHECK(t, cur_device() == 0, "after alloc: current device %d, expected 0", cur_device());

    CHECK(t, b1->i.upload(b1, p, src, n) == 0, "upload to rank 1 failed");
    memset(dst, 0, n);
    CHECK(t, b1->i.download(b1, dst, p, n) == 0, "download from rank 1 failed");
    CHECK(t, memcmp(src, dst, n) == 0, "rank 1: download after upload differs");
    CHECK(t, cur_device() == 0, "after upload/download: current device %d, expected 0", cur_device());

    void *q = b1->i.alloc(b1, n);
    MUST(q);
    CHECK(t, b1->i.copy(b1, q, p, n) == 0, "copy on rank 1 failed");
    CHECK(t, b1->i.sync(b1) == 0, "sync of rank 1 failed");
    memset(dst, 0, n);
    CHECK(t, b1->i.download(b1, dst, q, n) == 0 && memcmp(src, dst, n) == 0, "rank 1: copy differs");
    CHECK(t, cur_device() == 0, "after copy/sync: current device %d, expected 0", cur_device());

    /* mem_info: 1 GiB on rank 1 shows on rank 1, not on rank 0 */
    size_t f0a = 0, f1a = 0, f0b = 0, f1b = 0, tot = 0;
    CHECK(t, b0->i.mem_info(b0, &f0a, &tot) == 0 && b1->i.mem_info(b1, &f1a, &tot) == 0, "mem_info failed");
    void *big = b1->i.alloc(b1, 1024 * MIB);
    MUST(big);
    CHECK(t, b0->i.mem_info(b0, &f0b, &tot) == 0 && b1->i.mem_info(b1, &f1b, &tot) == 0, "mem_info failed");
    CHECK(t, f1a >= f1b + 1024 * MIB, "rank 1's free memory went from %zu to %zu MiB after 1 GiB there", f1a / MIB,
          f1b / MIB);
    CHECK(t, f0b + 256 * MIB >= f0a, "rank 0's free memory went from %zu to %zu MiB after 1 GiB on rank 1", f0a / MIB,
          f0b / MIB);
    b1->i.dealloc(b1, big);
    CHECK(t, cur_device() == 0, "after mem_info: current device %d, expected 0", cur_device());

    /* pinned memory and the asynchronous copies */
    unsigned char *hs = b1->i.alloc_host(b1, n), *hd = b1->i.alloc_host(b1, n);
    CHECK(t, hs && hd, "alloc_host on rank 1 failed");
    if (hs && hd) {
        fill_bytes(hs, n, 2);
        uint64_t tk = 0;
        CHECK(t, b1->i.upload_async(b1, p, hs, n, &tk) == 0, "upload_async to rank 1 failed");
        int done = 0;
        for (long spin = 0; spin < 20000000 && done == 0; spin++) {
            done = b1->i.upload_done(b1, tk);
            if (done == 0)
                usleep(5);
        }
        CHECK(t, done == 1, "upload_done on rank 1 said %d", done);
        memset(hd, 0, n);
        uint64_t td = 0;
        CHECK(t, b1->i.download_async(b1, hd, p, n, &td) == 0 && b1->i.download_wait(b1, td) == 0,
              "download_async/download_wait on rank 1 failed");
        CHECK(t, memcmp(hs, hd, n) == 0, "rank 1: async download after async upload differs");
    }
    if (hs)
        b1->i.free_host(b1, hs);
    if (hd)
        b1->i.free_host(b1, hd);
    CHECK(t, cur_device() == 0, "after the async copies: current device %d, expected 0", cur_device());

    b1->i.dealloc(b1, q);
    b1->i.dealloc(b1, p);
    CHECK(t, cur_device() == 0, "after dealloc: current device %d, expected 0", cur_device());
    free(src), free(dst);
}

int main(void)
{
    setenv("NCCL_NVLS_ENABLE", "0", 0); /* no NVLink multicast: not needed here */
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 2) {
        printf("test_cuda_group: SKIP: %d CUDA device(s), 2 needed\n", n_dev);
        return 0;
    }
    tally t = {0, 0};
    lg_backend *be[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) {
        lg_err err = {0};
        lg_backend_opts o = {0};
        o.device = r;
        o.act_dtype_hint = LG_F16;
        if (lg_backend_create("cuda", &o, &be[r], &err) != 0) {
            fprintf(stderr, "cuda backend on device %d: %s\n", r, err.msg);
            return 2;
        }
    }
    CHECK(&t, be[0]->i.group_init && be[0]->i.all_reduce && be[0]->i.bind_thread, "a group slot is NULL");
    if (!be[0]->i.group_init || !be[0]->i.all_reduce || !be[0]->i.bind_thread)
        return 1;

    /* outside a group: x is left as it was */
    {
        MUST(be[0]->i.bind_thread(be[0]) == 0);
        const int64_t n = 7;
        void *h = make_input(LG_F32, 0, n, 0), *d = be[0]->i.alloc(be[0], n * 4);
        MUST(d);
        MUST(be[0]->i.upload(be[0], d, h, n * 4) == 0);
        CHECK(&t, be[0]->i.all_reduce(be[0], lg_tensor_2d(d, LG_F32, 1, n)) == 0, "all_reduce outside a group failed");
        float got[7];
        MUST(be[0]->i.download(be[0], got, d, n * 4) == 0);
        CHECK(&t, memcmp(got, h, n * 4) == 0, "all_reduce outside a group changed x");
        be[0]->i.dealloc(be[0], d);
        free(h);
    }

    /* refusals, then the group */
    lg_err err = {0};
    lg_backend *same[2] = {be[0], be[0]};
    CHECK(&t, be[0]->i.group_init(same, 2, &err) != 0, "group_init took device 0 twice");
    printf("refused as expected: %s\n", err.msg);
    CHECK(&t, be[0]->i.group_init(be, 1, &err) != 0, "group_init took one backend");
    memset(&err, 0, sizeof err);
    const int gi = be[0]->i.group_init(be, 2, &err);
    CHECK(&t, gi == 0, "group_init: %s", err.msg);
    if (gi != 0) {
        printf("group: %d passed, %d failed\n", t.pass, t.fail);
        return 1;
    }
    CHECK(&t, be[0]->i.group_init(be, 2, &err) != 0, "group_init took backends already in a group");

    MUST(be[0]->i.bind_thread(be[0]) == 0);
    CHECK(&t, cur_device() == 0, "main thread: current device %d after bind_thread(rank 0)", cur_device());
    any_thread_checks(be[0], be[1], &t);

    rank_arg ra[2];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        memset(&ra[r], 0, sizeof ra[r]);
        ra[r].be = be[r], ra[r].rank = r, ra[r].ranks = 2;
        MUST(pthread_create(&th[r], NULL, rank_main, &ra[r]) == 0);
    }
    for (int r = 0; r < 2; r++) {
        pthread_join(th[r], NULL);
        t.pass += ra[r].t.pass, t.fail += ra[r].t.fail;
    }

    /* the recordings from the main thread (rank 1's from device 0), then their buffers */
    for (int r = 0; r < 2; r++) {
        be[r]->i.graph_reset(be[r]);
        if (ra[r].graph_buf)
            be[r]->i.dealloc(be[r], ra[r].graph_buf);
    }
    CHECK(&t, cur_device() == 0, "after graph_reset: current device %d, expected 0", cur_device());

    lg_backend_free(be[0]); /* rank 0 first */
    lg_backend_free(be[1]);
    CHECK(&t, 1, "freed rank 0, then rank 1");
    printf("group: %d passed, %d failed\n", t.pass, t.fail);
    return t.fail ? 1 : 0;
}
