/*
 * get_rows.cu — row gather (the rows that produce logits).
 *
 *   for i < n:  out[i, :] = x[rows[i], :]        (same dtype: a byte copy)
 */
#include "kernels/ops.cuh"

template <typename W>
__global__ void get_rows_kernel(char *out, size_t ldo_bytes, const char *x, size_t ldx_bytes, const int32_t *rows,
                                int row_words)
{
    const int i = blockIdx.x;
    W *o = (W *)(out + (size_t)i * ldo_bytes);
    const W *s = (const W *)(x + (size_t)rows[i] * ldx_bytes);
    for (int j = threadIdx.x; j < row_words; j += blockDim.x) o[j] = s[j];
}

int cu_get_rows(lg_backend *be, lg_tensor out, lg_tensor x, const int32_t *rows, int n)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "get_rows out", out);
    CU_CHECK_VIEW(c, "get_rows x", x);
    if (out.dtype != x.dtype || out.cols != x.cols || out.rows < n || n < 0)
        return CU_FAIL(c, "get_rows: out %s [%lld,%lld] vs x %s [%lld,%lld], n = %d", lg_dtype_name(out.dtype),
                       (long long)out.rows, (long long)out.cols, lg_dtype_name(x.dtype), (long long)x.rows,
                       (long long)x.cols, n);
    if (!rows)
        return CU_FAIL(c, "get_rows: rows is NULL");
    if (n == 0)
        return 0;
    const size_t es = lg_dtype_size(x.dtype), row = (size_t)x.cols * es;
    const size_t ldo = (size_t)out.stride * es, ldx = (size_t)x.stride * es;
    if (row % 16 == 0 && ldo % 16 == 0 && ldx % 16 == 0 && cu_aligned16(out.data) && cu_aligned16(x.data))
        get_rows_kernel<uint4><<<n, 128, 0, c->stream>>>((char *)out.data, ldo, (const char *)x.data, ldx, rows,
                                                         (int)(row / 16));
    else if (es == 2)
        get_rows_kernel<uint16_t><<<n, 128, 0, c->stream>>>((char *)out.data, ldo, (const char *)x.data, ldx, rows,
                                                            (int)(row / 2));
    else
        get_rows_kernel<uint32_t><<<n, 128, 0, c->stream>>>((char *)out.data, ldo, (const char *)x.data, ldx, rows,
                                                            (int)(row / 4));
    CU_LAUNCHED(c);
    return 0;
}
