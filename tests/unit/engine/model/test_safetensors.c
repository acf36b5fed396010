/*
 * test_safetensors.c — the safetensors reader against fixtures written by
 * tests/fixtures/hf/make_fixtures.py (the real `safetensors` package for the
 * tiny models, hand-made bytes for the hostile files), the HF `safetensors`
 * package's own view of every fixture file (test_hf_view), hand-written
 * hostile headers for the streaming parser's grammar and limits (deep
 * nesting, tensor counts, long names, escapes and UTF-8, overflowing
 * integers, overlaps, duplicates), plus a mutation loop over an in-memory
 * copy of a valid file. Every hostile input must give -1 and a one-line
 * message; run under ASan/UBSan to prove "no crash". The memory bound under
 * hostile input is test_safetensors_memory.c.
 */
#include "engine/model/safetensors.h"
#include "tests/unit/test.h"

#include <stdint.h>

#define FIX "tests/fixtures/hf/"

/* ---- in-memory files ---------------------------------------------------------- */

/* malloc or exit: the tests below build headers of up to ~70 MiB */
static void *xmalloc(size_t n)
{
    void *p = malloc(n + 1);
    if (!p)
        abort();
    return p;
}

/* u64 hl | header | data_len bytes of data (value i & 0xff at i); caller frees. */
static uint8_t *mk_file(const char *h, size_t hl, size_t data_len, size_t *size)
{
    *size = 8 + hl + data_len;
    uint8_t *b = xmalloc(*size);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, h, hl);
    for (size_t i = 0; i < data_len; i++)
        b[8 + hl + i] = (uint8_t)i;
    return b;
}

/* Opens header h (hl bytes, or strlen if 0) over data_len bytes; returns rc, *f or the message. */
static int open_hdr(const char *h, size_t hl, size_t data_len, lg_st_file **f, lg_err *err, uint8_t **keep)
{
    size_t size;
    uint8_t *b = mk_file(h, hl ? hl : strlen(h), data_len, &size);
    *f = NULL;
    int rc = lg_st_open_buffer(b, size, "mem", f, err);
    if (keep)
        *keep = b;
    else if (rc == 0) {
        CHECK_MSG(0, "caller must keep the buffer of a valid file");
        lg_st_close(*f);
        *f = NULL;
        free(b);
    } else
        free(b);
    return rc;
}

static void expect_bad(const char *h, size_t hl, size_t data_len, const char *needle)
{
    lg_err err = {{0}};
    lg_st_file *f = (lg_st_file *)1;
    int rc = open_hdr(h, hl, data_len, &f, &err, NULL);
    char shown[120];
    snprintf(shown, sizeof shown, "%.100s", h);
    for (char *c = shown; *c; c++)
        if ((unsigned char)*c < 0x20)
            *c = '?';
    CHECK_MSG(rc == -1 && f == NULL, "header %s: opened, expected '%s'", shown, needle);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "header %s: message '%s' lacks '%s'", shown, err.msg, needle);
    CHECK_MSG(err.msg[0] && !strchr(err.msg, '\n') && !strncmp(err.msg, "mem: ", 5),
              "header %s: message '%s' not one line naming the file", shown, err.msg);
}

/* Opens a valid header; the caller closes *f and frees the returned buffer. */
static uint8_t *expect_ok(const char *h, size_t hl, size_t data_len, lg_st_file **f)
{
    lg_err err = {{0}};
    uint8_t *b = NULL;
    int rc = open_hdr(h, hl, data_len, f, &err, &b);
    CHECK_MSG(rc == 0 && *f, "header %.100s: %s", h, err.msg);
    if (rc == 0)
        CHECK_MSG(lg_st_table_bytes(*f) <= 3 * (hl ? hl : strlen(h)) + 64, "header %.60s: table of %zu bytes",
                  h, lg_st_table_bytes(*f));
    return b;
}

/* ---- the HF `safetensors` package's view of every fixture -------------------------------
 * Generated with safetensors 0.8.0 (deserialize() for names, dtypes, shapes and
 * data, safe_open().metadata()) by hashing, FNV-1a 64: tensors sorted by name:
 * name \0 dtype \0 d0,d1,... \0 data \0; then __metadata__ sorted by key:
 * key \0 value \0. n = -1: the package refuses the file.
 *
 *   import glob, os, safetensors
 *   def fnv(h, b):
 *       for x in b: h = ((h ^ x) * 0x100000001b3) & (2**64 - 1)
 *       return h
 *   for p in sorted(glob.glob(os.path.join("tests/fixtures", "**", "*.safetensors"), recursive=True)
 *                   + glob.glob(os.path.join("tests/golden", "**", "*.safetensors"), recursive=True)):
 *       try:
 *           ts = safetensors.deserialize(open(p, "rb").read())
 *           meta = safetensors.safe_open(p, framework="np").metadata() or {}
 *       except Exception: print(p, -1, 0); continue
 *       h = 0xcbf29ce484222325
 *       for name, t in sorted(ts, key=lambda x: x[0].encode()):
 *           h = fnv(h, name.encode() + b"\0" + t["dtype"].encode() + b"\0"
 *                   + ",".join(map(str, t["shape"])).encode() + b"\0")
 *           h = fnv(h, bytes(t["data"]) + b"\0")
 *       for k in sorted(meta, key=lambda x: x.encode()):
 *           h = fnv(h, k.encode() + b"\0" + meta[k].encode() + b"\0")
 *       print(p, len(ts), hex(h))
 */
static const struct {
    const char *path;
    int n;
    uint64_t hash;
} hf_view[] = {
    {"tests/fixtures/hf/hostile/bad_dtype.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/bytes_overflow.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/duplicate_names.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/header_huge.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/header_not_json.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/header_not_object.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/header_past_eof.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/hole.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/i64.safetensors", 1, 0xd1e1204dfca9b22dull},
    {"tests/fixtures/hf/hostile/index_lists_absent/model-00001-of-00002.safetensors", 11, 0x4a89d91df1df8c75ull},
    {"tests/fixtures/hf/hostile/index_lists_absent/model-00002-of-00002.safetensors", 12, 0xe41674d7421e986eull},
    {"tests/fixtures/hf/hostile/metadata_not_string.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/missing_shard/model-00001-of-00002.safetensors", 11, 0x4a89d91df1df8c75ull},
    {"tests/fixtures/hf/hostile/nbytes_mismatch.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/no_offsets.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/offsets_out_of_range.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/offsets_reversed.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/overlap.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/shape_negative.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/shape_overflow.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/too_short.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/trailing.safetensors", -1, 0},
    {"tests/fixtures/hf/hostile/valid.safetensors", 1, 0x313ebd2ef6546474ull},
    {"tests/fixtures/hf/tiny_llama/model.safetensors", 21, 0x6d074b8becc4aec7ull},
    {"tests/fixtures/hf/tiny_llama_sharded/model-00001-of-00002.safetensors", 11, 0x4a89d91df1df8c75ull},
    {"tests/fixtures/hf/tiny_llama_sharded/model-00002-of-00002.safetensors", 12, 0xe41674d7421e986eull},
    {"tests/fixtures/hf/tiny_qwen2/model.safetensors", 26, 0x2f8274e4d45cf93aull},
    {"tests/fixtures/peft/all_linear_f32/adapter_model.safetensors", 24, 0xe23df4ab237f184bull},
    {"tests/fixtures/peft/default_bf16/adapter_model.safetensors", 8, 0x0033b291c98cf9d6ull},
    {"tests/fixtures/peft/fan_in_fan_out/adapter_model.safetensors", 8, 0x3889d184378453ecull},
    {"tests/fixtures/peft/layers_int/adapter_model.safetensors", 4, 0x6fe642339c0e1f28ull},
    {"tests/fixtures/peft/layers_list/adapter_model.safetensors", 4, 0xaae31693f7359ecbull},
    {"tests/fixtures/peft/list_f16/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/patterns/adapter_model.safetensors", 12, 0x7cd73f05cacabc9bull},
    {"tests/fixtures/peft/regex/adapter_model.safetensors", 4, 0x656e82a130b4a94aull},
    {"tests/fixtures/peft/reject/a_without_b/adapter_model.safetensors", 7, 0x7ed9c7e4d9a4635dull},
    {"tests/fixtures/peft/reject/b_without_a/adapter_model.safetensors", 7, 0x10ef4e3716e0f08aull},
    {"tests/fixtures/peft/reject/bias_all/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/dora_config/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/dora_tensor/adapter_model.safetensors", 9, 0xe2e57bb4ba4db936ull},
    {"tests/fixtures/peft/reject/dtype_f64/adapter_model.safetensors", 8, 0x5af5329b747fbf70ull},
    {"tests/fixtures/peft/reject/dtype_mixed/adapter_model.safetensors", 8, 0x84088c45dd6002caull},
    {"tests/fixtures/peft/reject/duplicate/adapter_model.safetensors", 10, 0xe96adab24cb357e7ull},
    {"tests/fixtures/peft/reject/embed_target/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/embedding_tensor/adapter_model.safetensors", 10, 0x990283760d54cf72ull},
    {"tests/fixtures/peft/reject/inconsistent_layer/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/inconsistent_target/adapter_model.safetensors", 8, 0x6e1b24a9cef47121ull},
    {"tests/fixtures/peft/reject/json_invalid/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/json_types/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/layer_range/adapter_model.safetensors", 10, 0x558bd6c92d861a33ull},
    {"tests/fixtures/peft/reject/lm_head_target/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/lora_bias/adapter_model.safetensors", 9, 0x0c9bd3fcfe80ebf9ull},
    {"tests/fixtures/peft/reject/missing_module/adapter_model.safetensors", 4, 0x5868aaae9449276dull},
    {"tests/fixtures/peft/reject/modules_to_save/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/no_match/adapter_model.safetensors", 0, 0xedf645b2346929f6ull},
    {"tests/fixtures/peft/reject/no_match_regex/adapter_model.safetensors", 0, 0xedf645b2346929f6ull},
    {"tests/fixtures/peft/reject/not_linear/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/overlap/adapter_model.safetensors", -1, 0},
    {"tests/fixtures/peft/reject/peft_type/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/rank_ab/adapter_model.safetensors", 8, 0x3d0dfbf595e29bcdull},
    {"tests/fixtures/peft/reject/rank_config/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/rank_pattern/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/regex_all/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/shape_in/adapter_model.safetensors", 8, 0x83b1910e196ee998ull},
    {"tests/fixtures/peft/reject/shape_out/adapter_model.safetensors", 8, 0x38ee29817632b970ull},
    {"tests/fixtures/peft/reject/transposed/adapter_model.safetensors", 8, 0xfa680d1082a77f09ull},
    {"tests/fixtures/peft/reject/truncated/adapter_model.safetensors", -1, 0},
    {"tests/fixtures/peft/reject/unknown_target/adapter_model.safetensors", 8, 0x9774ee99404a04f4ull},
    {"tests/fixtures/peft/reject/unknown_tensor/adapter_model.safetensors", 9, 0x12a5af3ac0c2880eull},
    {"tests/fixtures/peft/rslora/adapter_model.safetensors", 4, 0x64be38862adfae26ull},
    {"tests/golden/fixtures/llama3_scaled_f32/model.safetensors", 21, 0x989be6f2a9f75aa9ull},
    {"tests/golden/fixtures/llama3_scaled_f32_rawcfg/model.safetensors", 20, 0xa9b70122908d1c99ull},
    {"tests/golden/fixtures/llama_gqa_f16/model.safetensors", 21, 0xbf86b20f2cdd8866ull},
    {"tests/golden/fixtures/llama_gqa_f32/model.safetensors", 21, 0xcbf7a3f9c5eb6e0bull},
    {"tests/golden/fixtures/llama_mha_bf16_tied/model.safetensors", 20, 0x93e4490e5f285134ull},
    {"tests/golden/fixtures/llama_mha_f32/model.safetensors", 21, 0xf9b00b878c30f409ull},
    {"tests/golden/fixtures/llama_mqa_bf16_3l/model.safetensors", 30, 0x62add12ccde132fbull},
    {"tests/golden/fixtures/llama_mqa_f32_tied/model.safetensors", 20, 0x89ebb91836ba7e57ull},
    {"tests/golden/fixtures/mistral_gqa_f32_hd32/model.safetensors", 21, 0xd8927cccfc9fc1b1ull},
    {"tests/golden/fixtures/qwen2_gqa_f32_tied/model.safetensors", 26, 0x8aca0ee0fc01b09cull},
    {"tests/golden/lora_fixtures/base/model.safetensors", 21, 0xf6798acb5dc9bdcdull},
    {"tests/golden/lora_fixtures/r16_all_linear/adapter_model.safetensors", 28, 0xa4aa4d4e24891651ull},
    {"tests/golden/lora_fixtures/r1_qv/adapter_model.safetensors", 8, 0xdeb1f04c601cfe8full},
    {"tests/golden/lora_fixtures/r4_patterns/adapter_model.safetensors", 20, 0x9137ed186ddadac2ull},
    {"tests/golden/lora_fixtures/r64_mlp/adapter_model.safetensors", 12, 0x00f252ad00db806cull},
    {"tests/golden/lora_fixtures/r8_bf16/adapter_model.safetensors", 16, 0xc5657760d5071592ull},
    {"tests/golden/lora_fixtures/r8_layer1/adapter_model.safetensors", 8, 0xdce04445382986ffull},
    {"tests/golden/lora_fixtures/r8_rslora_attn/adapter_model.safetensors", 16, 0xde858a1f6962c245ull},
};

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static int cmp_str_ptr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_hf_view(void)
{
    for (size_t i = 0; i < sizeof hf_view / sizeof hf_view[0]; i++) {
        lg_err err = {{0}};
        lg_st_file *f = NULL;
        int rc = lg_st_open(hf_view[i].path, &f, &err);
        if (hf_view[i].n < 0) {
            CHECK_MSG(rc == -1, "%s: the HF package refuses it, we opened it", hf_view[i].path);
            lg_st_close(f);
            continue;
        }
        CHECK_MSG(rc == 0, "%s: the HF package reads it, we refuse: %s", hf_view[i].path, err.msg);
        if (rc)
            continue;
        int n = lg_st_count(f);
        CHECK_MSG(n == hf_view[i].n, "%s: %d tensors, the HF package sees %d", hf_view[i].path, n, hf_view[i].n);
        const char **names = calloc((size_t)n + 1, sizeof *names);
        for (int k = 0; k < n; k++)
            names[k] = lg_st_at(f, k)->name;
        qsort(names, (size_t)n, sizeof *names, cmp_str_ptr);
        uint64_t h = 0xcbf29ce484222325ull;
        for (int k = 0; k < n; k++) {
            const lg_st_tensor *t = lg_st_get(f, names[k]);
            char dims[256] = "";
            size_t o = 0;
            for (int d = 0; d < t->n_dims; d++)
                o += (size_t)snprintf(dims + o, sizeof dims - o, "%s%lld", d ? "," : "", (long long)t->shape[d]);
            h = fnv(h, t->name, strlen(t->name) + 1);
            h = fnv(h, t->dtype_name, strlen(t->dtype_name) + 1);
            h = fnv(h, dims, strlen(dims) + 1);
            h = fnv(h, t->data, t->nbytes);
            h = fnv(h, "", 1);
        }
        for (int k = 0; k < lg_st_metadata_count(f); k++) {
            const char *key = lg_st_metadata_key(f, k), *v = lg_st_metadata(f, key);
            CHECK(k == 0 || strcmp(lg_st_metadata_key(f, k - 1), key) < 0);
            h = fnv(h, key, strlen(key) + 1);
            h = fnv(h, v, strlen(v) + 1);
        }
        CHECK_MSG(h == hf_view[i].hash, "%s: our view hashes to %016llx, the HF package's to %016llx",
                  hf_view[i].path, (unsigned long long)h, (unsigned long long)hf_view[i].hash);
        free(names);
        lg_st_close(f);
    }
}

/* ---- hostile headers for the streaming parser ------------------------------------ */

#define T0 "{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}"
#define E(shape, offs) "{\"a\":{\"dtype\":\"F32\",\"shape\":" shape ",\"data_offsets\":" offs "}}"

static void test_grammar(void)
{
    static const struct {
        const char *h;
        size_t data_len;
        const char *needle;
    } bad[] = {
        /* the grammar: a tensor entry is an object of exactly dtype/shape/data_offsets */
        {"{\"a\":[[],[],[]]}", 0, "tensor 'a': expected an object with dtype/shape/data_offsets, found a list"},
        {"{\"a\":\"x\"}", 0, "expected an object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0],\"x\":1}}", 0, "unexpected key 'x'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0],\"meta\":{\"a\":[[[]]]}}}", 0,
         "unexpected key 'meta'"},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}}", 0,
         "duplicate key \"dtype\""},
        {"{\"a\":{\"dtype\":[\"F32\"],\"shape\":[0],\"data_offsets\":[0,0]}}", 0,
         "expected a string \"dtype\", found a list"},
        {"{\"a\":{\"dtype\":\"F32_BUT_A_VERY_LONG_NAME_THAT_NEVER_ENDS\",\"shape\":[0],\"data_offsets\":[0,0]}}",
         0, "unknown dtype 'F32_BUT_A_VERY_LONG_NAME_THAT_N..."},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":{},\"data_offsets\":[0,0]}}", 0,
         "expected an array \"shape\", found an object"},
        {"{\"a\":{\"shape\":[0],\"data_offsets\":[0,0]}}", 0, "expected a string \"dtype\", found none"},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,0]}}", 0, "expected an array \"shape\", found none"},
        {E("[[0]]", "[0,0]"), 0, "shape[0] is not a non-negative integer"},
        {E("[1.0]", "[0,4]"), 4, "shape[0] is not a non-negative integer"},
        {E("[1e2]", "[0,400]"), 400, "shape[0] is not a non-negative integer"},
        {E("[2,-1]", "[0,0]"), 0, "shape[1] is not a non-negative integer"},
        {E("[true]", "[0,0]"), 0, "shape[0] is not a non-negative integer"},
        {E("[\"1\"]", "[0,4]"), 4, "shape[0] is not a non-negative integer"},
        {E("[null]", "[0,4]"), 4, "shape[0] is not a non-negative integer"},
        {E("[1,1,1,1,1,1,1,1,1]", "[0,4]"), 4, "rank above 8"},
        {E("[1,1,1,1,1,1,1,1,[]]", "[0,4]"), 4, "rank above 8"},
        /* integers that overflow */
        {E("[18446744073709551616]", "[0,0]"), 0, "shape[0] is too large"},
        {E("[9223372036854775808]", "[0,0]"), 0, "shape[0] is too large"},
        {E("[99999999999999999999999999999999999999999999]", "[0,0]"), 0, "shape[0] is too large"},
        {E("[4294967296,4294967296]", "[0,0]"), 0, "the product of the shape overflows"},
        {E("[4611686018427387904]", "[0,0]"), 0, "overflow a byte count"},
        {E("[0]", "[0,18446744073709551616]"), 0, "data_offsets[1] is too large"},
        {E("[0]", "[0,18446744073709551615]"), 0, "past the 0-byte data buffer"},
        {E("[0]", "[-1,0]"), 0, "data_offsets must be non-negative integers"},
        {E("[0]", "[0.0,0]"), 0, "data_offsets must be non-negative integers"},
        {E("[0]", "[0,0,0]"), 0, "found more than two"},
        {E("[0]", "[0]"), 0, "expected \"data_offsets\": [begin, end]"},
        {E("[0]", "{}"), 0, "expected \"data_offsets\": [begin, end], found an object"},
        {E("[1]", "[4,0]"), 4, "end before they begin"},
        {E("[2]", "[0,4]"), 4, "shape and F32 need 8 bytes, data_offsets give 4"},
        /* offsets across entries */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "tensor 'b' [4, 12) overlaps 'a'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "overlaps"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "belong to no tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "cover 4 bytes of a 8-byte"},
        {"{}", 4, "cover 0 bytes of a 4-byte"},
        /* duplicates, also when spelled differently */
        {"{\"a\":" T0 ",\"a\":" T0 "}", 0, "duplicate tensor name 'a'"},
        {"{\"a\":" T0 ",\"\\u0061\":" T0 "}", 0, "duplicate tensor name 'a'"},
        {"{\"\\u00e9\":" T0 ",\"\xc3\xa9\":" T0 "}", 0, "duplicate tensor name"},
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate key \"__metadata__\""},
        {"{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate __metadata__ key 'k'"},
        {"{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0, "__metadata__['k'] is not a string (found an object)"},
        {"{\"__metadata__\":{\"k\":1}}", 0, "__metadata__['k'] is not a string (found a number)"},
        {"{\"__metadata__\":null}", 0, "__metadata__ is not an object"},
        {"{\"__metadata__\":[[[[]]]]}", 0, "__metadata__ is not an object"},
        /* strings: escapes, UTF-8, control characters */
        {"{\"a\\x\":" T0 "}", 0, "invalid escape"},
        {"{\"\\u12\":" T0 "}", 0, "invalid \\u escape"},
        {"{\"\\u12G4\":" T0 "}", 0, "invalid \\u escape"},
        {"{\"\\uD800\":" T0 "}", 0, "unpaired high surrogate"},
        {"{\"\\uD800\\u0041\":" T0 "}", 0, "unpaired high surrogate"},
        {"{\"\\uDC00\":" T0 "}", 0, "unpaired low surrogate"},
        {"{\"a\\u0000b\":" T0 "}", 0, "\\u0000 in a string is not allowed"},
        {"{\"a\x01\":" T0 "}", 0, "control character in a string"},
        {"{\"a\\n\":" T0 "}", 0, "tensor name at header byte 1 contains a control character"},
        {"{\"a\x7f\":" T0 "}", 0, "contains a control character"},
        {"{\"\xc0\x80\":" T0 "}", 0, "invalid UTF-8"},
        {"{\"\xed\xa0\x80\":" T0 "}", 0, "invalid UTF-8"},
        {"{\"\xf4\x90\x80\x80\":" T0 "}", 0, "invalid UTF-8"},
        {"{\"\xe2\x82\":" T0 "}", 0, "invalid UTF-8"},
        {"{\"\xff\":" T0 "}", 0, "invalid UTF-8"},
        {"{\"\x80\":" T0 "}", 0, "invalid UTF-8"},
        {"{\"__metadata__\":{\"k\":\"\xe0\x80\xaf\"}}", 0, "invalid UTF-8"},
        {"{\"__metadata__\":{\"k\":\"abc", 0, "unterminated string"},
        /* the document */
        {"{\"a\":" T0 "} x", 0, "expected only whitespace after the header object"},
        {"{\"a\":" T0 "}}", 0, "expected only whitespace"},
        {"{\"a\":" T0, 0, "not valid JSON"},
        {"{\"a\":" T0 ",}", 0, "not valid JSON: expected a string key"},
        {"{,}", 0, "not valid JSON"},
        {"{\"a\" " T0 "}", 0, "expected ':'"},
        {"{'a':1}", 0, "not valid JSON"},
        {"{\"a\":{\"dtype\":\"F32\" \"shape\":[0]}}", 0, "expected ',' or '}'"},
        {E("[0 0]", "[0,0]"), 0, "expected ',' or ']'"},
        {E("[01]", "[0,4]"), 4, "not valid JSON"},
        {E("[1.]", "[0,4]"), 4, "not valid JSON"},
        {E("[-]", "[0,4]"), 4, "not valid JSON"},
        {E("[1e]", "[0,4]"), 4, "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_bad(bad[i].h, 0, bad[i].data_len, bad[i].needle);
    /* a NUL inside the header (not a C string) */
    static const char nul[] = "{\"a\":" T0 "}\0";
    expect_bad(nul, sizeof nul - 1, 0, "expected only whitespace");
    static const char nul2[] = "{\"a\0\":" T0 "}";
    expect_bad(nul2, sizeof nul2 - 1, 0, "control character in a string");

    /* valid: whitespace anywhere, keys in any order, "-0", scalars, escapes, metadata */
    lg_st_file *f = NULL;
    uint8_t *b = expect_ok("{}", 0, 0, &f);
    CHECK(f && lg_st_count(f) == 0 && lg_st_metadata_count(f) == 0);
    lg_st_close(f);
    free(b);
    b = expect_ok("{ \t\n\r\"b\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 8 ] , \"dtype\" : \"F32\" } \r\n}   \n",
                  0, 8, &f);
    CHECK(f && lg_st_count(f) == 1 && lg_st_get(f, "b") && lg_st_get(f, "b")->offset == 8 + 85);
    lg_st_close(f);
    free(b);
    b = expect_ok("{\"b\":{\"shape\":[2],\"data_offsets\":[4,12],\"dtype\":\"F32\"},"
                  "\"s\":{\"data_offsets\":[-0,4],\"dtype\":\"I32\",\"shape\":[]},"
                  "\"__metadata__\":{\"z\":\"1\",\"a\":\"line\\none \\\"q\\\" \\/\",\"m\":\"\\ud83d\\ude00\"},"
                  "\"\\u00e9\\ud83d\\ude00\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[12,12]}}",
                  0, 12, &f);
    if (f) {
        CHECK(lg_st_count(f) == 3);
        const lg_st_tensor *s = lg_st_get(f, "s"), *t = lg_st_get(f, "b"), *u = lg_st_get(f, "\xc3\xa9\xf0\x9f\x98\x80");
        CHECK(s && s->n_dims == 0 && s->n_elems == 1 && s->nbytes == 4 && s == lg_st_at(f, 0));
        CHECK(t && t->n_dims == 1 && t->shape[0] == 2 && ((const uint8_t *)t->data)[0] == 4);
        CHECK(u && u->n_dims == 2 && u->n_elems == 0 && u->nbytes == 0 && !strcmp(u->dtype_name, "U8"));
        CHECK(lg_st_metadata_count(f) == 3);
        CHECK(!strcmp(lg_st_metadata_key(f, 0), "a") && !strcmp(lg_st_metadata_key(f, 1), "m") &&
              !strcmp(lg_st_metadata_key(f, 2), "z") && lg_st_metadata_key(f, 3) == NULL);
        CHECK(!strcmp(lg_st_metadata(f, "a"), "line\none \"q\" /"));
        CHECK(!strcmp(lg_st_metadata(f, "m"), "\xf0\x9f\x98\x80") && !strcmp(lg_st_metadata(f, "z"), "1"));
        CHECK(lg_st_metadata(f, "b") == NULL && lg_st_metadata(f, "") == NULL);
    }
    lg_st_close(f);
    free(b);
}

/* Value the generator wrote at flat index i of tensor `name` (its HF name). */
static float fixture_value(const char *name, size_t i)
{
    unsigned k = 0;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        k += *p;
    k %= 97;
    return (float)((long)((i * 7 + k) % 97) - 48) / 64.0f;
}

static void test_valid(void)
{
    lg_err err = {{0}};
    lg_st_file *f = NULL;
    CHECK_MSG(lg_st_open(FIX "hostile/valid.safetensors", &f, &err) == 0, "%s", err.msg);
    if (!f)
        return;
    CHECK(lg_st_count(f) == 1);
    const lg_st_tensor *t = lg_st_get(f, "a");
    CHECK(t && t == lg_st_at(f, 0));
    if (t) {
        CHECK(t->has_lg_dtype && t->dtype == LG_F32 && t->st_dtype == LG_ST_F32);
        CHECK(!strcmp(t->dtype_name, "F32"));
        CHECK(t->n_dims == 2 && t->shape[0] == 2 && t->shape[1] == 2);
        CHECK(t->n_elems == 4 && t->nbytes == 16);
        float v[4];
        memcpy(v, t->data, 16);
        CHECK(v[0] == 0 && v[1] == 1 && v[2] == 2 && v[3] == 3);
    }
    CHECK(lg_st_get(f, "b") == NULL);
    CHECK(lg_st_at(f, 1) == NULL && lg_st_at(f, -1) == NULL);
    CHECK(lg_st_metadata(f, "format") == NULL);

    /* the mapping can be taken away and outlives the file handle */
    lg_mmap m = {0};
    CHECK(lg_st_take_mmap(f, &m, &err) == 0 && m.data);
    CHECK(lg_st_take_mmap(f, &m, &err) == -1);
    const uint8_t *d = t ? t->data : NULL; /* this writer did not pad: may be misaligned */
    lg_st_close(f);
    if (d) {
        float v3;
        memcpy(&v3, d + 12, 4);
        CHECK(v3 == 3.0f);
    }
    lg_mmap_close(&m);
    lg_st_close(NULL);
}

static void test_i64(void)
{
    lg_err err = {{0}};
    lg_st_file *f = NULL;
    CHECK_MSG(lg_st_open(FIX "hostile/i64.safetensors", &f, &err) == 0, "%s", err.msg);
    if (!f)
        return;
    const lg_st_tensor *t = lg_st_get(f, "ids");
    CHECK(t && !t->has_lg_dtype && t->st_dtype == LG_ST_I64 && !strcmp(t->dtype_name, "I64"));
    if (t) {
        int64_t v[2];
        memcpy(v, t->data, 16);
        CHECK(v[0] == 5 && v[1] == -6);
    }
    CHECK(lg_st_metadata(f, "format") && !strcmp(lg_st_metadata(f, "format"), "pt"));
    CHECK(lg_st_dtype_size(LG_ST_BF16) == 2 && lg_st_dtype_size(LG_ST_F64) == 8);
    lg_st_close(f);
}

static void test_tiny_llama_values(void)
{
    lg_err err = {{0}};
    lg_st_file *f = NULL;
    CHECK_MSG(lg_st_open(FIX "tiny_llama/model.safetensors", &f, &err) == 0, "%s", err.msg);
    if (!f)
        return;
    CHECK(lg_st_count(f) == 21);
    CHECK(lg_st_metadata(f, "format") && !strcmp(lg_st_metadata(f, "format"), "pt"));
    int bad = 0;
    size_t prev_end = 0;
    for (int i = 0; i < lg_st_count(f); i++) {
        const lg_st_tensor *t = lg_st_at(f, i);
        CHECK(lg_st_get(f, t->name) == t);
        CHECK(t->dtype == LG_F16 && t->has_lg_dtype);
        CHECK(i == 0 || t->offset == prev_end); /* sorted, contiguous */
        prev_end = t->offset + t->nbytes;
        for (size_t e = 0; e < t->n_elems; e++)
            bad += lg_f16_to_f32(((const uint16_t *)t->data)[e]) != fixture_value(t->name, e);
    }
    CHECK_MSG(bad == 0, "%d values differ from the generator's", bad);
    const lg_st_tensor *q = lg_st_get(f, "model.layers.1.self_attn.k_proj.weight");
    CHECK(q && q->n_dims == 2 && q->shape[0] == 16 && q->shape[1] == 32);
    lg_st_close(f);
}

static void test_hostile(void)
{
    static const struct {
        const char *file, *needle;
    } cases[] = {
        {"too_short.safetensors", "at least 8"},
        {"header_past_eof.safetensors", "past the end"},
        {"header_huge.safetensors", "exceeds the limit"},
        {"header_not_json.safetensors", "not valid JSON"},
        {"header_not_object.safetensors", "start with '{'"},
        {"offsets_out_of_range.safetensors", "past the"},
        {"offsets_reversed.safetensors", "end before"},
        {"overlap.safetensors", "overlaps"},
        {"hole.safetensors", "belong to no tensor"},
        {"trailing.safetensors", "cover 8 bytes of a 16-byte"},
        {"nbytes_mismatch.safetensors", "need 8 bytes"},
        {"shape_overflow.safetensors", "overflows"},
        {"bytes_overflow.safetensors", "overflow"},
        {"shape_negative.safetensors", "non-negative"},
        {"duplicate_names.safetensors", "duplicate"},
        {"bad_dtype.safetensors", "unknown dtype 'F99'"},
        {"metadata_not_string.safetensors", "not a string"},
        {"no_offsets.safetensors", "data_offsets"},
        {"does_not_exist.safetensors", "cannot open"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[256];
        snprintf(path, sizeof path, FIX "hostile/%s", cases[i].file);
        lg_err err = {{0}};
        lg_st_file *f = (lg_st_file *)1;
        int rc = lg_st_open(path, &f, &err);
        CHECK_MSG(rc == -1 && f == NULL, "%s opened", cases[i].file);
        CHECK_MSG(strstr(err.msg, cases[i].needle) != NULL, "%s: message '%s' lacks '%s'", cases[i].file, err.msg,
                  cases[i].needle);
        CHECK_MSG(err.msg[0] && !strchr(err.msg, '\n'), "%s: message not one line", cases[i].file);
    }
}

/* Every truncation of a real file and many random byte mutations of its
 * header: the reader must fail cleanly or succeed with in-bounds views. */
static void test_mutations(void)
{
    lg_mmap m;
    lg_err err = {{0}};
    if (lg_mmap_open(FIX "tiny_llama/model.safetensors", &m, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    size_t n = m.size;
    uint8_t *buf = malloc(n);
    uint64_t hl = 0;
    memcpy(&hl, m.data, 8);
    int opened = 0, failed = 0;
    for (size_t len = 0; len < n; len += (len < hl + 64 ? 1 : 997)) {
        memcpy(buf, m.data, n);
        lg_st_file *f;
        if (lg_st_open_buffer(buf, len, "trunc", &f, &err) == 0) {
            opened++;
            lg_st_close(f);
        } else
            failed++;
    }
    CHECK(opened == 0 && failed > 0); /* no strict prefix of a file is a valid file */
    uint64_t x = 88172645463325252ull;
    int ok_views = 1;
    for (int it = 0; it < 4000; it++) {
        memcpy(buf, m.data, n);
        int flips = 1 + it % 4;
        for (int k = 0; k < flips; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t pos = 8 + (size_t)(x % hl);
            static const char alphabet[] = "0123456789[]{},:\"-eE. FBI";
            buf[pos] = (it & 1) ? (uint8_t)(x >> 32) : (uint8_t)alphabet[(x >> 24) % (sizeof alphabet - 1)];
        }
        lg_st_file *f;
        if (lg_st_open_buffer(buf, n, "mut", &f, &err) == 0) {
            for (int i = 0; i < lg_st_count(f); i++) {
                const lg_st_tensor *t = lg_st_at(f, i);
                const uint8_t *p = t->data;
                ok_views &= p >= buf && p + t->nbytes <= buf + n;
            }
            lg_st_close(f);
        } else {
            ok_views &= err.msg[0] != 0 && !strchr(err.msg, '\n');
        }
    }
    CHECK(ok_views);
    free(buf);
    lg_mmap_close(&m);
}

/* Names: at most LG_ST_MAX_NAME decoded bytes. */
static void test_limits(void)
{
    size_t hcap = 64 + 6 * (LG_ST_MAX_NAME + 1);
    char *h = xmalloc(hcap);
    char *name = xmalloc(6 * (LG_ST_MAX_NAME + 1) + 1);
    lg_st_file *f = NULL;
    uint8_t *b;

    memset(name, 'n', LG_ST_MAX_NAME);
    name[LG_ST_MAX_NAME] = 0;
    snprintf(h, hcap, "{\"%s\":" T0 "}", name);
    b = expect_ok(h, 0, 0, &f);
    CHECK(f && lg_st_get(f, name) != NULL);
    lg_st_close(f);
    free(b);
    snprintf(h, hcap, "{\"%sn\":" T0 "}", name);
    expect_bad(h, 0, 0, "tensor name at header byte 1 is longer than 1024 bytes");
    /* the limit is on decoded bytes: \u00e9 is 2 */
    name[0] = 0;
    for (int i = 0; i < LG_ST_MAX_NAME / 2; i++)
        strcat(name, "\\u00e9");
    snprintf(h, hcap, "{\"%s\":" T0 "}", name);
    b = expect_ok(h, 0, 0, &f);
    CHECK(f && strlen(lg_st_at(f, 0)->name) == LG_ST_MAX_NAME);
    lg_st_close(f);
    free(b);
    snprintf(h, hcap, "{\"%s\\u00e9\":" T0 "}", name);
    expect_bad(h, 0, 0, "longer than 1024 bytes");
    memset(name, 'k', LG_ST_MAX_NAME + 1);
    name[LG_ST_MAX_NAME + 1] = 0;
    snprintf(h, hcap, "{\"__metadata__\":{\"%s\":\"v\"}}", name);
    expect_bad(h, 0, 0, "__metadata__ key at header byte 17 is longer than 1024 bytes");
    /* a long name in a message is cut */
    name[200] = 0;
    snprintf(h, hcap, "{\"%s\":[]}", name);
    lg_err err = {{0}};
    CHECK(open_hdr(h, 0, 0, &f, &err, NULL) == -1 && strstr(err.msg, "kkk...'") && strlen(err.msg) < 300);
    free(h);
    free(name);
}

/* Tensor and metadata counts; the table bound on many of the smallest entries. */
static void test_counts(void)
{
    lg_st_file *f = NULL;
    uint8_t *b;

    /* LG_ST_MAX_TENSORS + 1 tensors: refused by the first pass, before any allocation */
    size_t cap = (size_t)(LG_ST_MAX_TENSORS + 1) * 64 + 16, o = 0;
    char *h = xmalloc(cap);
    o += (size_t)sprintf(h + o, "{");
    for (int i = 0; i <= LG_ST_MAX_TENSORS; i++)
        o += (size_t)sprintf(h + o, "%s\"%x\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}", i ? "," : "", i);
    o += (size_t)sprintf(h + o, "}");
    expect_bad(h, o, 0, "more than 1048576 tensors");
    /* LG_ST_MAX_METADATA entries are fine, one more is not */
    o = (size_t)sprintf(h, "{\"__metadata__\":{");
    for (int i = 0; i < LG_ST_MAX_METADATA; i++)
        o += (size_t)sprintf(h + o, "%s\"%x\":\"\"", i ? "," : "", i);
    strcpy(h + o, "}}");
    b = expect_ok(h, o + 2, 0, &f);
    CHECK(f && lg_st_metadata_count(f) == LG_ST_MAX_METADATA && lg_st_metadata(f, "ffff") &&
          !*lg_st_metadata(f, "ffff"));
    lg_st_close(f);
    free(b);
    o += (size_t)sprintf(h + o, ",\"x\":\"\"}}");
    expect_bad(h, o, 0, "__metadata__ has more than 65536 entries");

    /* the table bound: many of the smallest entries (1-3 byte names) stay under 3 x the header */
    o = (size_t)sprintf(h, "{");
    for (int i = 0; i < 200000; i++)
        o += (size_t)sprintf(h + o, "%s\"%x\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}", i ? "," : "", i);
    o += (size_t)sprintf(h + o, ",\"__metadata__\":{");
    for (int i = 0; i < 60000; i++)
        o += (size_t)sprintf(h + o, "%s\"%x\":\"\"", i ? "," : "", i);
    o += (size_t)sprintf(h + o, "}}");
    b = expect_ok(h, o, 0, &f);
    CHECK(f && lg_st_count(f) == 200000 && lg_st_get(f, "30d3f") && lg_st_get(f, "30d40") == NULL);
    printf("200000 tensors + 60000 metadata: header %zu bytes, table %zu bytes (%.2f x)\n", o, lg_st_table_bytes(f),
           (double)lg_st_table_bytes(f) / (double)o);
    lg_st_close(f);
    free(b);
    free(h);
}

/* Deep nesting where a value is expected: refused at the first level that is not the grammar's. */
static void test_nesting(void)
{
    size_t depth = 1 << 20, hcap = 2 * depth + 64;
    char *h = xmalloc(hcap);
    size_t o = (size_t)snprintf(h, hcap, "{\"a\":{\"dtype\":\"F32\",\"shape\":");
    memset(h + o, '[', depth);
    memset(h + o + depth, ']', depth);
    o += 2 * depth;
    o += (size_t)sprintf(h + o, ",\"data_offsets\":[0,0]}}");
    expect_bad(h, o, 0, "shape[0] is not a non-negative integer");
    o = (size_t)snprintf(h, hcap, "{\"a\":");
    memset(h + o, '{', depth);
    expect_bad(h, o + depth, 0, "not valid JSON: expected a string key");
    o = (size_t)snprintf(h, hcap, "{\"__metadata__\":{\"k\":");
    memset(h + o, '[', depth);
    expect_bad(h, o + depth, 0, "__metadata__['k'] is not a string");
    free(h);
}

int main(void)
{
    test_hf_view();
    test_grammar();
    test_limits();
    test_counts();
    test_nesting();
    test_valid();
    test_i64();
    test_tiny_llama_values();
    test_hostile();
    test_mutations();
    TEST_DONE();
}
