/*
 * common.h — things every loragate module shares: status/error reporting,
 * element types, checked arithmetic, half-precision conversion.
 *
 * Error convention (all library code): functions return 0 on success and -1 on
 * failure; on failure they fill the caller's lg_err with one line that says
 * where (file:line of the check), what was expected and what was found.
 * Library code never calls exit() or abort() on bad input.
 */
#ifndef LG_COMMON_H
#define LG_COMMON_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct lg_err {
    char msg[512];
} lg_err;

/* Formats into err->msg (err may be NULL), followed by " [file:line]" when
 * lg_err_locations is set. Always returns -1 so callers can write
 * `return lg_fail(err, ...)`. */
int lg_fail_at(lg_err *err, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define lg_fail(err, ...) lg_fail_at((err), __FILE__, __LINE__, __VA_ARGS__)
/* Process-wide, 0 by default: set from LG_DEBUG_ERRORS when a backend is created
 * (engine/base/tuning.h, the table of LG_* switches). */
extern int lg_err_locations;

/* Prefixes an existing error with context ("loading adapter X: ..."). */
void lg_err_prefix(lg_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Element types of tensors in memory. Quantized GGUF types never reach the
 * engine: they are dequantized at load (engine/model/quant.c). LG_F8E4M3 is
 * the KV cache's 1-byte form only (`--kv-cache-dtype fp8`: OCP E4M3FN, read
 * back times the layer's k_scale / v_scale, lg_kv_view); no activation or
 * weight view carries it, and lg_to_f32 / lg_from_f32 take it unscaled. */
typedef enum lg_dtype {
    LG_F32 = 0,
    LG_F16 = 1,
    LG_BF16 = 2,
    LG_I32 = 3,
    LG_F8E4M3 = 4,
} lg_dtype;

/* Inline so the CUDA library (linked after the core) shares them. */
static inline size_t lg_dtype_size(lg_dtype t)
{
    return t == LG_F32 || t == LG_I32 ? 4 : t == LG_F8E4M3 ? 1 : 2;
}
static inline const char *lg_dtype_name(lg_dtype t)
{
    switch (t) {
    case LG_F32: return "f32";
    case LG_F16: return "f16";
    case LG_BF16: return "bf16";
    case LG_I32: return "i32";
    case LG_F8E4M3: return "f8e4m3";
    }
    return "?";
}
/* "f32"/"float32", "f16"/"float16", "bf16"/"bfloat16" -> 0, else -1 */
int lg_dtype_parse(const char *s, lg_dtype *out);

/* Checked arithmetic: return false on overflow (result undefined then). */
static inline bool lg_mul_ok(size_t a, size_t b, size_t *r) { return !__builtin_mul_overflow(a, b, r); }
static inline bool lg_add_ok(size_t a, size_t b, size_t *r) { return !__builtin_add_overflow(a, b, r); }

/* IEEE half and bfloat16 <-> float. Round to nearest even on the way down. */
float lg_f16_to_f32(uint16_t h);
uint16_t lg_f32_to_f16(float f);
static inline float lg_bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
uint16_t lg_f32_to_bf16(float f);

/* Converts n elements of src (type st) to float. */
/* OCP FP8 E4M3FN (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn): 1 sign, 4
 * exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN, the
 * largest finite value 448. lg_f32_to_e4m3 rounds to nearest even and
 * saturates to +-448 (what quantizers do after their clamp); NaN stays NaN. */
float lg_e4m3_to_f32(uint8_t v);
uint8_t lg_f32_to_e4m3(float x);

void lg_to_f32(float *dst, const void *src, lg_dtype st, size_t n);
/* Converts n floats to dst of type dt (F32/F16/BF16/I32/F8E4M3). */
void lg_from_f32(void *dst, lg_dtype dt, const float *src, size_t n);

/* Whole-file helpers. lg_read_file mallocs (caller frees) and NUL-terminates;
 * refuses files larger than max_bytes. */
int lg_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len, lg_err *err);

/* Read-only mapping of a whole file. lg_mmap_close(NULL-initialised) is a no-op. */
typedef struct lg_mmap {
    void *data;
    size_t size;
} lg_mmap;
int lg_mmap_open(const char *path, lg_mmap *m, lg_err *err);
void lg_mmap_close(lg_mmap *m);

/* Monotonic clock in seconds. */
double lg_now(void);

/* Log to stderr with a level; quiet by default for debug. */
extern int lg_log_verbose;
void lg_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A growable NUL-terminated string (JSON-free text output: chat templates,
 * CSV, Prometheus text, HTML). Zero-initialise; p stays NULL until the first
 * append. After an allocation failure `oom` is set and later appends are
 * dropped, so a writer checks it once at the end; free(b.p) when done. */
typedef struct lg_strbuf {
    char *p;
    size_t len, cap;
    bool oom;
} lg_strbuf;
void lg_strbuf_put(lg_strbuf *b, const char *s, size_t n);
void lg_strbuf_puts(lg_strbuf *b, const char *s);
void lg_strbuf_printf(lg_strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
