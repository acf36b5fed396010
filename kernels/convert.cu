/*
 * convert.cu — dtype conversion between strided views of one shape.
 *
 *   for r < rows, j < cols:  dst[r, j] = round_to(dst.dtype, float(src[r, j]))
 */
#include "kernels/ops.cuh"

template <typename TO, typename TI>
__global__ void convert_kernel(TO *dst, int64_t ldd, const TI *src, int64_t lds, int cols)
{
    const int r = blockIdx.y;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += gridDim.x * blockDim.x)
        dst[(int64_t)r * ldd + j] = from_f32<TO>(to_f32(src[(int64_t)r * lds + j]));
}

template <typename TO, typename TI> static void launch(cuda_ctx *c, lg_tensor dst, lg_tensor src)
{
    unsigned bx = (unsigned)((src.cols + 255) / 256);
    if (bx > 64)
        bx = 64;
    for (int64_t r0 = 0; r0 < src.rows; r0 += 65535) { /* grid.y limit */
        int64_t nr = src.rows - r0 < 65535 ? src.rows - r0 : 65535;
        convert_kernel<TO, TI><<<dim3(bx, (unsigned)nr), 256, 0, c->stream>>>(
            (TO *)dst.data + r0 * dst.stride, dst.stride, (const TI *)src.data + r0 * src.stride, src.stride,
            (int)src.cols);
    }
}

template <typename TO> static void launch_o(cuda_ctx *c, lg_tensor dst, lg_tensor src)
{
    if (src.dtype == LG_F32) launch<TO, float>(c, dst, src);
    else if (src.dtype == LG_F16) launch<TO, __half>(c, dst, src);
    else launch<TO, __nv_bfloat16>(c, dst, src);
}

int cu_convert(lg_backend *be, lg_tensor dst, lg_tensor src)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "convert dst", dst);
    CU_CHECK_VIEW(c, "convert src", src);
    if (dst.rows != src.rows || dst.cols != src.cols)
        return CU_FAIL(c, "convert: dst [%lld,%lld] vs src [%lld,%lld]", (long long)dst.rows, (long long)dst.cols,
                       (long long)src.rows, (long long)src.cols);
    if (src.rows == 0)
        return 0;
    if (dst.dtype == LG_F32) launch_o<float>(c, dst, src);
    else if (dst.dtype == LG_F16) launch_o<__half>(c, dst, src);
    else launch_o<__nv_bfloat16>(c, dst, src);
    CU_LAUNCHED(c);
    return 0;
}
