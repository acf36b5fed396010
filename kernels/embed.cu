/*
 * embed.cu — token embedding lookup.
 *
 *   for t < T:  out[t, :] = (0 <= tok[t] < table.rows) ? table[tok[t], :] : 0
 *
 * out in act dtype (f16/bf16) or f32; table f32/f16/bf16 (converted through
 * f32 when they differ). One block per token; a 16-byte copy loop when
 * both sides are the same half type and aligned.
 */
#include "kernels/ops.cuh"

template <typename TO, typename TI>
__global__ void embed_kernel(TO *out, int64_t ldo, const TI *table, int64_t ldt, int64_t n_rows, const int32_t *tok,
                             int D, bool vec)
{
    const int t = blockIdx.x;
    const int32_t id = tok[t];
    TO *o = out + (int64_t)t * ldo;
    const bool ok = id >= 0 && id < n_rows;
    const TI *r = table + (int64_t)(ok ? id : 0) * ldt;
    if (vec) { /* same 16-bit type, D % 8 == 0, rows 16-byte aligned */
        for (int i = threadIdx.x; i < D / 8; i += blockDim.x)
            ((uint4 *)o)[i] = ok ? ((const uint4 *)r)[i] : make_uint4(0, 0, 0, 0);
        return;
    }
    for (int i = threadIdx.x; i < D; i += blockDim.x) o[i] = from_f32<TO>(ok ? to_f32(r[i]) : 0.0f);
}

template <typename TO, typename TI>
static void launch(cuda_ctx *c, lg_tensor out, lg_tensor table, const int32_t *tok)
{
    const size_t es = sizeof(TO);
    bool vec = sizeof(TO) == sizeof(TI) && es == 2 && (uint32_t)out.dtype == (uint32_t)table.dtype &&
               out.cols % 8 == 0 && cu_aligned16(out.data) && cu_aligned16(table.data) && out.stride % 8 == 0 &&
               table.stride % 8 == 0;
    embed_kernel<TO, TI><<<(unsigned)out.rows, 128, 0, c->stream>>>((TO *)out.data, out.stride,
                                                                    (const TI *)table.data, table.stride,
                                                                    table.rows, tok, (int)out.cols, vec);
}

template <typename TO> static void launch_o(cuda_ctx *c, lg_tensor out, lg_tensor table, const int32_t *tok)
{
    if (table.dtype == LG_F32) launch<TO, float>(c, out, table, tok);
    else if (table.dtype == LG_F16) launch<TO, __half>(c, out, table, tok);
    else launch<TO, __nv_bfloat16>(c, out, table, tok);
}

int cu_embed(lg_backend *be, lg_tensor out, lg_tensor table, const int32_t *tok)
{
    cuda_ctx *c = CU_CTX(be);
    CU_CHECK_VIEW(c, "embed out", out);
    CU_CHECK_VIEW(c, "embed table", table);
    if (table.q != LG_QNONE) /* takes_quant is for matmul's W: the model keeps embedding tables unquantized */
        return CU_FAIL(c, "embed: the CUDA backend takes no quantized table (found %s)", lg_qtype_get(table.q).name);
    if (out.cols != table.cols)
        return CU_FAIL(c, "embed: out has %lld cols, table %lld", (long long)out.cols, (long long)table.cols);
    if (!tok)
        return CU_FAIL(c, "embed: tok is NULL");
    if (out.rows == 0)
        return 0;
    if (out.dtype == LG_F32) launch_o<float>(c, out, table, tok);
    else if (out.dtype == LG_F16) launch_o<__half>(c, out, table, tok);
    else launch_o<__nv_bfloat16>(c, out, table, tok);
    CU_LAUNCHED(c);
    return 0;
}
