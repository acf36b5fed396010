/*
 * rope.cu — rotate-half rotary embedding, in place on q and k.
 *
 *   for t < T, i < hd/2:  ang = pos[t] * inv_freq[i]        (exact: f32 hi + lo, see below)
 *     for each head h of q (n_heads) and of k (n_kv_heads):
 *       a = x[t, h*hd + i], b = x[t, h*hd + i + hd/2]
 *       x[.. + i] = a cos - b sin;  x[.. + i + hd/2] = b cos + a sin
 *
 * Angles in f32 without the f32 product's rounding: hi = pos * f rounded,
 * lo = fma(pos, f, -hi) its exact remainder, then cos/sin of hi (sincosf,
 * full range reduction) corrected to first order in lo. That equals the
 * CPU oracle's f64 angle to a few f32 ulps at any position below 2^24,
 * where a plain f32 angle is off by up to half an ulp of pos (2e-3 rad at
 * 32k). HF forms the plain f32 angle; the difference is below f16 rounding.
 *
 * One block per token: the block computes the hd/2 (cos, sin) pairs once
 * into shared memory, then rotates every head of q and k, 8 element pairs
 * per thread through 16-byte loads when hd % 16 == 0 and the rows are
 * aligned (else 1 pair per thread). The angles depend only on step
 * metadata, so they are computed before pdl_wait: with programmatic
 * dependent launch (cuda_common.cuh) that overlaps the qkv matmul's tail.
 * Decode (32 tokens x 40 heads x 128) is ~0.8 MB moved: latency-bound.
 */
#include "kernels/ops.cuh"

#define ROPE_MAX_THREADS 512 /* rope_cos_sin: cuda_common.cuh (shared with rope_kv.cu) */

/* V consecutive elements at p as floats, and back (V = 8: one 16-byte word). */
template <typename T, int V> struct rope_io {
    static __device__ __forceinline__ void load(const T *p, float *f) { unpack8<T>(*(const uint4 *)p, f); }
    static __device__ __forceinline__ void store(T *p, const float *f) { *(uint4 *)p = pack8<T>(f); }
};
template <typename T> struct rope_io<T, 1> {
    static __device__ __forceinline__ void load(const T *p, float *f) { f[0] = to_f32(*p); }
    static __device__ __forceinline__ void store(T *p, const float *f) { *p = from_f32<T>(f[0]); }
};

template <typename T, int V>
__global__ void rope_kernel(T *q, int64_t ldq, T *k, int64_t ldk, const int32_t *pos, const float *inv_freq, int nh,
                            int nkv, int hd)
{
    extern __shared__ float cs[]; /* [hd/2] cos, then [hd/2] sin */
    const int64_t t = blockIdx.x;
    const int half = hd / 2, per_head = half / V, n = (nh + nkv) * per_head;
    /* item j: head j / per_head, pairs [i0, i0 + V) with i0 = (j % per_head) * V */
    auto ptr = [&](int j) {
        const int h = j / per_head;
        return (h < nh ? q + t * ldq + (int64_t)h * hd : k + t * ldk + (int64_t)(h - nh) * hd) + (j % per_head) * V;
    };
    pdl_trigger();
    /* positions and frequencies are step metadata: the angles are computed
     * while the kernel before (the qkv matmul) may still run */
    const float p = (float)pos[t];
    for (int i = threadIdx.x; i < half; i += blockDim.x) rope_cos_sin(p, inv_freq[i], &cs[i], &cs[half + i]);
    pdl_wait();
    __syncthreads();
    float a[V], b[V];
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        T *v = ptr(j);
        rope_io<T, V>::load(v, a);
        rope_io<T, V>::load(v + half, b);
        const int i0 = (j % per_head) * V;
        float ra[V], rb[V];
#pragma unroll
        for (int e = 0; e < V; e++) {
            const float co = cs[i0 + e], s = cs[half + i0 + e];
            rope_rotate(a[e], b[e], co, s, &ra[e], &rb[e]);
        }
        rope_io<T, V>::store(v, ra);
        rope_io<T, V>::store(v + half, rb);
    }
}

template <typename T>
static void launch(cuda_ctx *c, lg_tensor q, lg_tensor k, const int32_t *pos, const float *inv_freq, int nh, int nkv,
                   int hd)
{
    const bool vec = sizeof(T) == 2 && hd % 16 == 0 && q.stride % 8 == 0 && k.stride % 8 == 0 &&
                     cu_aligned16(q.data) && cu_aligned16(k.data);
    const int V = vec ? 8 : 1, n = (nh + nkv) * (hd / 2 / V);
    int thr = (n + 31) / 32 * 32;
    thr = thr < 64 ? 64 : thr > ROPE_MAX_THREADS ? ROPE_MAX_THREADS : thr;
    const size_t sm = (size_t)hd * sizeof(float);
    const unsigned g = (unsigned)q.rows;
    if constexpr (sizeof(T) == 2) {
        if (vec) {
            (void)cu_launch(c, rope_kernel<T, 8>, g, thr, sm, (T *)q.data, q.stride, (T *)k.data, k.stride, pos,
                            inv_freq, nh, nkv, hd);
            return;
        }
    }
    (void)cu_launch(c, rope_kernel<T, 1>, g, thr, sm, (T *)q.data, q.stride, (T *)k.data, k.stride, pos, inv_freq, nh,
                    nkv, hd);
}

int cu_rope(lg_backend *be, lg_tensor q, lg_tensor k, const int32_t *pos, const float *inv_freq, int n_heads,
            int n_kv_heads, int head_dim)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "rope q", q);
    CU_CHECK_VIEW(c, "rope k", k);
    if (q.dtype != k.dtype)
        return CU_FAIL(c, "rope: q %s and k %s differ", lg_dtype_name(q.dtype), lg_dtype_name(k.dtype));
    if (head_dim <= 0 || head_dim % 2 || head_dim > 1024)
        return CU_FAIL(c, "rope: head_dim must be even and <= 1024, found %d", head_dim);
    if (q.cols < (int64_t)n_heads * head_dim || k.cols < (int64_t)n_kv_heads * head_dim || q.rows != k.rows)
        return CU_FAIL(c, "rope: q [%lld,%lld] / k [%lld,%lld] too small for %d/%d heads of %d", (long long)q.rows,
                       (long long)q.cols, (long long)k.rows, (long long)k.cols, n_heads, n_kv_heads, head_dim);
    if (!pos || !inv_freq)
        return CU_FAIL(c, "rope: pos or inv_freq is NULL");
    if (q.rows == 0)
        return 0;
    if (q.dtype == LG_F32) launch<float>(c, q, k, pos, inv_freq, n_heads, n_kv_heads, head_dim);
    else if (q.dtype == LG_F16) launch<__half>(c, q, k, pos, inv_freq, n_heads, n_kv_heads, head_dim);
    else launch<__nv_bfloat16>(c, q, k, pos, inv_freq, n_heads, n_kv_heads, head_dim);
    CU_LAUNCHED(c);
    return 0;
}
