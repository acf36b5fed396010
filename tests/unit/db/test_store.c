/*
 * test_store.c — tenants, API keys, adapters, settings and maintenance on a
 * real database: CRUD, name rules, soft-delete cascades, key format and
 * entropy, lookups of revoked and altered secrets, the auth snapshot and
 * cache (lookups on several threads during refreshes), the
 * content-addressed adapter files, backup and integrity check.
 */
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "db/adapter_files.h"
#include "tests/unit/db/db_test_util.h"
#include "db/store.h"

static lg_store *st;
static char dir[512];

static lg_adapter_version version_of(const char *digest_seed, int rank)
{
    lg_adapter_version v;
    memset(&v, 0, sizeof v);
    for (int i = 0; i < 64; i++)
        v.digest[i] = "0123456789abcdef"[(digest_seed[i % strlen(digest_seed)] + i) & 15];
    snprintf(v.path, sizeof v.path, "adapters/%s", v.digest);
    v.size_bytes = 1000 + rank;
    v.max_rank = rank;
    snprintf(v.target_modules, sizeof v.target_modules, "q_proj,v_proj");
    return v;
}

static void test_names(void)
{
    lg_err err;
    const char *good[] = {"a", "acme", "acme-corp", "0", "a1-b2-c3", "x23456789012345678901234567890123456789012345678901234567890123"};
    const char *bad[] = {"", "-acme", "Acme", "acme_corp", "acme corp", "acme.corp", "é",
                         "x234567890123456789012345678901234567890123456789012345678901234"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        CHECK_MSG(lg_store_check_tenant_name(good[i], &err) == 0, "%s: %s", good[i], err.msg);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_MSG(lg_store_check_tenant_name(bad[i], &err) == LG_STORE_INVALID, "'%s' accepted", bad[i]);
        CHECK(strlen(err.msg) > 0 && !strchr(err.msg, '\n'));
    }
    CHECK(lg_store_check_tenant_name(NULL, &err) == LG_STORE_INVALID);
    CHECK(lg_store_check_adapter_name("Support-Bot_v2.1", &err) == 0);
    CHECK(lg_store_check_adapter_name(".hidden", &err) == LG_STORE_INVALID);
    CHECK(lg_store_check_adapter_name("a/b", &err) == LG_STORE_INVALID);
    CHECK(lg_store_check_adapter_name("", &err) == LG_STORE_INVALID);
}

static void test_tenants(void)
{
    lg_err err = {{0}};
    lg_tenant t, t2;
    lg_tenant_spec spec = lg_tenant_spec_init("acme");
    CHECK_MSG(lg_store_tenant_create(st, &spec, &t, &err) == 0, "%s", err.msg);
    CHECK(t.id > 0 && !strcmp(t.name, "acme") && t.weight == 1 && !t.has_pricing && t.deleted_at == 0);
    CHECK(t.limits.rpm == LG_UNLIMITED && t.limits.tpm == LG_UNLIMITED && t.limits.concurrent == LG_UNLIMITED &&
          t.limits.monthly_tokens == LG_UNLIMITED);
    CHECK(t.created_at > 1700000000000LL);

    CHECK(lg_store_tenant_create(st, &spec, NULL, &err) == LG_STORE_CONFLICT);
    CHECK_MSG(strstr(err.msg, "already exists"), "%s", err.msg);
    lg_tenant_spec badname = lg_tenant_spec_init("Bad Name");
    CHECK(lg_store_tenant_create(st, &badname, NULL, &err) == LG_STORE_INVALID);
    lg_tenant_spec badw = lg_tenant_spec_init("w0");
    badw.weight = 0;
    CHECK(lg_store_tenant_create(st, &badw, NULL, &err) == LG_STORE_INVALID);
    lg_tenant_spec badl = lg_tenant_spec_init("l0");
    badl.limits.rpm = -2;
    CHECK(lg_store_tenant_create(st, &badl, NULL, &err) == LG_STORE_INVALID);
    lg_tenant_spec badp = lg_tenant_spec_init("p0");
    badp.has_pricing = true;
    badp.pricing.output = -1;
    CHECK(lg_store_tenant_create(st, &badp, NULL, &err) == LG_STORE_INVALID);

    /* update: weight, pricing, limits */
    lg_tenant_spec up = lg_tenant_spec_init(NULL);
    up.weight = 4;
    up.has_pricing = true;
    up.pricing = (lg_pricing){150000, 75000, 600000};
    up.limits = (lg_tenant_limits){60, 100000, 0, 5000000000LL};
    CHECK_MSG(lg_store_tenant_update(st, "acme", &up, &t2, &err) == 0, "%s", err.msg);
    CHECK(t2.id == t.id && t2.weight == 4 && t2.has_pricing && t2.pricing.input == 150000 &&
          t2.pricing.cached_input == 75000 && t2.pricing.output == 600000);
    CHECK(t2.limits.rpm == 60 && t2.limits.tpm == 100000 && t2.limits.concurrent == 0 &&
          t2.limits.monthly_tokens == 5000000000LL);
    CHECK(lg_store_tenant_update(st, "nobody", &up, NULL, &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_tenant_get(st, "acme", &t2, &err) == 0 && t2.weight == 4);
    CHECK(lg_store_tenant_get(st, "nobody", &t2, &err) == LG_STORE_NOT_FOUND);

    /* pricing: the tenant's own, or the server default */
    lg_pricing p;
    CHECK(lg_store_default_pricing_get(st, &p, &err) == 0 && p.input == 0 && p.output == 0);
    CHECK(lg_store_default_pricing_set(st, &(lg_pricing){1000000, 500000, 2000000}, &err) == 0);
    CHECK(lg_store_default_pricing_set(st, &(lg_pricing){-1, 0, 0}, &err) == LG_STORE_INVALID);
    CHECK(lg_store_effective_pricing(st, t.id, &p, &err) == 0 && p.input == 150000);
    lg_tenant_spec beta = lg_tenant_spec_init("beta");
    lg_tenant b;
    CHECK(lg_store_tenant_create(st, &beta, &b, &err) == 0);
    CHECK(lg_store_effective_pricing(st, b.id, &p, &err) == 0 && p.input == 1000000 && p.cached_input == 500000 &&
          p.output == 2000000);

    lg_tenant *list;
    int n;
    CHECK(lg_store_tenant_list(st, false, &list, &n, &err) == 0 && n == 2);
    CHECK(n == 2 && !strcmp(list[0].name, "acme") && !strcmp(list[1].name, "beta"));
    free(list);
}

static void test_keys(void)
{
    lg_err err = {{0}};
    unsigned sc = 0;
    CHECK(lg_store_scopes_parse("inference", &sc, &err) == 0 && sc == LG_SCOPE_INFERENCE);
    CHECK(lg_store_scopes_parse("adapters,inference", &sc, &err) == 0 && sc == LG_SCOPE_ALL);
    CHECK(lg_store_scopes_parse("inference,inference", &sc, &err) == LG_STORE_INVALID);
    CHECK(lg_store_scopes_parse("admin", &sc, &err) == LG_STORE_INVALID);
    CHECK(lg_store_scopes_parse("inference,", &sc, &err) == LG_STORE_INVALID);
    CHECK(lg_store_scopes_parse("", &sc, &err) == LG_STORE_INVALID);
    CHECK(!strcmp(lg_store_scopes_name(LG_SCOPE_ALL), "inference,adapters"));
    CHECK(!strcmp(lg_store_scopes_name(0), ""));

    lg_api_key k, got;
    char secret[LG_KEY_SECRET_LEN + 1];
    CHECK_MSG(lg_store_key_create(st, "acme", "prod server", LG_SCOPE_INFERENCE, &k, secret, &err) == 0, "%s",
              err.msg);
    /* formats */
    CHECK(strlen(secret) == LG_KEY_SECRET_LEN && !strncmp(secret, "lg-", 3));
    for (int i = 3; i < LG_KEY_SECRET_LEN; i++) {
        char c = secret[i];
        CHECK((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_');
    }
    CHECK(strlen(k.id) == LG_KEY_ID_LEN && !strncmp(k.id, "key_", 4));
    for (int i = 4; i < LG_KEY_ID_LEN; i++)
        CHECK((k.id[i] >= 'a' && k.id[i] <= 'z') || (k.id[i] >= '2' && k.id[i] <= '7'));
    CHECK(!strncmp(k.prefix, secret, LG_KEY_PREFIX_LEN) && strlen(k.prefix) == LG_KEY_PREFIX_LEN);
    CHECK(!strcmp(k.tenant_name, "acme") && !strcmp(k.name, "prod server") && k.scopes == LG_SCOPE_INFERENCE);

    /* lookup */
    CHECK_MSG(lg_store_key_lookup(st, secret, &got, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(got.id, k.id) && got.tenant_id == k.tenant_id && got.revoked_at == 0);
    char altered[LG_KEY_SECRET_LEN + 1];
    memcpy(altered, secret, sizeof altered);
    altered[20] = altered[20] == 'A' ? 'B' : 'A';
    CHECK(lg_store_key_lookup(st, altered, &got, &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_key_lookup(st, "lg-short", &got, &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_key_lookup(st, "", &got, &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_key_lookup(st, NULL, &got, &err) == LG_STORE_NOT_FOUND);
    char prefixed[LG_KEY_SECRET_LEN + 2];
    snprintf(prefixed, sizeof prefixed, "%sx", secret);
    CHECK(lg_store_key_lookup(st, prefixed, &got, &err) == LG_STORE_NOT_FOUND);

    /* invalid creations */
    CHECK(lg_store_key_create(st, "nobody", "", LG_SCOPE_ALL, NULL, secret, &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_key_create(st, "acme", "", 0, NULL, altered, &err) == LG_STORE_INVALID);
    CHECK(lg_store_key_create(st, "acme", "", 4, NULL, altered, &err) == LG_STORE_INVALID);
    CHECK(lg_store_key_create(st, "acme", "tab\there", 1, NULL, altered, &err) == LG_STORE_INVALID);

    /* revoke */
    char s2[LG_KEY_SECRET_LEN + 1];
    lg_api_key k2;
    CHECK(lg_store_key_create(st, "acme", "ci", LG_SCOPE_ALL, &k2, s2, &err) == 0);
    CHECK(lg_store_key_revoke(st, k2.id, &err) == 0);
    CHECK(lg_store_key_revoke(st, k2.id, &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_key_revoke(st, "key_doesnotexist00", &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_key_lookup(st, s2, &got, &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_key_lookup(st, secret, &got, &err) == 0);
    lg_api_key *keys;
    int n;
    CHECK(lg_store_key_list(st, "acme", false, &keys, &n, &err) == 0 && n == 1);
    free(keys);
    CHECK(lg_store_key_list(st, "acme", true, &keys, &n, &err) == 0 && n == 2);
    CHECK(n == 2 && keys[1].revoked_at > 0 && !strcmp(keys[1].id, k2.id));
    free(keys);

    /* snapshot: live keys only */
    char sb[LG_KEY_SECRET_LEN + 1];
    CHECK(lg_store_key_create(st, "beta", "", LG_SCOPE_ADAPTERS, NULL, sb, &err) == 0);
    lg_key_snapshot *snap = NULL;
    CHECK(lg_store_key_snapshot(st, &snap, &err) == 0 && lg_key_snapshot_count(snap) == 2);
    const lg_key_entry *e = lg_key_snapshot_find(snap, secret, strlen(secret));
    CHECK(e && !strcmp(e->id, k.id) && !strcmp(e->tenant_name, "acme") && e->scopes == LG_SCOPE_INFERENCE);
    e = lg_key_snapshot_find(snap, sb, strlen(sb));
    CHECK(e && !strcmp(e->tenant_name, "beta") && e->scopes == LG_SCOPE_ADAPTERS);
    CHECK(lg_key_snapshot_find(snap, s2, strlen(s2)) == NULL);
    CHECK(lg_key_snapshot_find(snap, altered, strlen(altered)) == NULL);
    CHECK(lg_key_snapshot_find(snap, "", 0) == NULL);
    CHECK(lg_key_snapshot_entry(snap, 0) && !lg_key_snapshot_entry(snap, 2));
    lg_key_snapshot_free(snap);
    lg_key_snapshot_free(NULL);

    /* the secret itself is nowhere in the files */
    const char *files[] = {"loragate.db", "loragate.db-wal"};
    for (int f = 0; f < 2; f++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, files[f]);
        FILE *fp = fopen(path, "rb");
        if (!fp)
            continue;
        fseek(fp, 0, SEEK_END);
        long sz = ftell(fp);
        fseek(fp, 0, SEEK_SET);
        char *buf = malloc((size_t)sz + 1);
        size_t rd = fread(buf, 1, (size_t)sz, fp);
        fclose(fp);
        CHECK(memmem(buf, rd, secret + 3, 20) == NULL);
        CHECK(memmem(buf, rd, sb + LG_KEY_PREFIX_LEN, 20) == NULL);
        free(buf);
    }
}

/* Key generation: distinct, and the secret characters uniform (chi-square). */
static void test_key_entropy(void)
{
    lg_err err;
    lg_tenant_spec spec = lg_tenant_spec_init("entropy");
    CHECK(lg_store_tenant_create(st, &spec, NULL, &err) == 0);
    enum { N = 400 };
    static char secrets[N][LG_KEY_SECRET_LEN + 1];
    static lg_api_key keys[N];
    long counts[128] = {0};
    for (int i = 0; i < N; i++) {
        if (lg_store_key_create(st, "entropy", "", LG_SCOPE_INFERENCE, &keys[i], secrets[i], &err) != 0) {
            CHECK_MSG(0, "%s", err.msg);
            return;
        }
        for (int c = 3; c < 3 + 42; c++) /* 42 full 6-bit characters; the 43rd carries 4 bits */
            counts[(unsigned char)secrets[i][c]]++;
    }
    int dup = 0;
    for (int i = 0; i < N; i++)
        for (int j = i + 1; j < N; j++)
            dup += !strcmp(secrets[i], secrets[j]) || !strcmp(keys[i].id, keys[j].id) ||
                   !strcmp(keys[i].prefix, keys[j].prefix);
    CHECK(dup == 0);
    const char *alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    double expected = N * 42.0 / 64.0, chi = 0;
    long total = 0;
    for (int i = 0; i < 64; i++) {
        double d = (double)counts[(unsigned char)alpha[i]] - expected;
        chi += d * d / expected;
        total += counts[(unsigned char)alpha[i]];
    }
    CHECK(total == N * 42);
    /* 63 degrees of freedom: mean 63; 140 is far in the tail (p < 1e-7) */
    CHECK_MSG(chi < 140, "chi-square %.1f", chi);
}

static void test_adapters(void)
{
    lg_err err = {{0}};
    lg_adapter_rec a, a2;
    lg_adapter_version v1 = version_of("one", 8), v2 = version_of("two", 16);
    CHECK_MSG(lg_store_adapter_create(st, "acme", "support-bot", &v1, &a, &err) == 0, "%s", err.msg);
    CHECK(a.id > 0 && !strcmp(a.name, "support-bot") && !strcmp(a.tenant_name, "acme") && a.deleted_at == 0);
    CHECK(a.current.version == 1 && !strcmp(a.current.digest, v1.digest) && a.current.max_rank == 8 &&
          !strcmp(a.current.target_modules, "q_proj,v_proj") && !strcmp(a.current.path, v1.path));
    CHECK(lg_store_adapter_create(st, "acme", "support-bot", &v2, NULL, &err) == LG_STORE_CONFLICT);
    /* another tenant may use the name; and cannot see acme's */
    CHECK(lg_store_adapter_create(st, "beta", "support-bot", &v2, NULL, &err) == 0);
    CHECK(lg_store_adapter_get(st, "beta", "support-bot", &a2, &err) == 0 && a2.current.max_rank == 16);
    CHECK(lg_store_adapter_get(st, "beta", "other", &a2, &err) == LG_STORE_NOT_FOUND);

    /* replace: version 2 becomes current */
    CHECK_MSG(lg_store_adapter_replace(st, "acme", "support-bot", &v2, &a2, &err) == 0, "%s", err.msg);
    CHECK(a2.id == a.id && a2.current.version == 2 && !strcmp(a2.current.digest, v2.digest));
    CHECK(lg_store_adapter_replace(st, "acme", "missing", &v2, NULL, &err) == LG_STORE_NOT_FOUND);
    lg_adapter_version *vs;
    int n;
    CHECK(lg_store_adapter_versions(st, "acme", "support-bot", &vs, &n, &err) == 0 && n == 2);
    CHECK(n == 2 && vs[0].version == 1 && vs[1].version == 2 && !strcmp(vs[0].digest, v1.digest));
    free(vs);

    /* validation */
    lg_adapter_version bad = v1;
    bad.digest[3] = 'G';
    CHECK(lg_store_adapter_create(st, "acme", "x", &bad, NULL, &err) == LG_STORE_INVALID);
    bad = v1;
    snprintf(bad.path, sizeof bad.path, "/etc/passwd");
    CHECK(lg_store_adapter_create(st, "acme", "x", &bad, NULL, &err) == LG_STORE_INVALID);
    snprintf(bad.path, sizeof bad.path, "adapters/../../x");
    CHECK(lg_store_adapter_create(st, "acme", "x", &bad, NULL, &err) == LG_STORE_INVALID);
    bad = v1;
    bad.max_rank = 0;
    CHECK(lg_store_adapter_create(st, "acme", "x", &bad, NULL, &err) == LG_STORE_INVALID);
    bad = v1;
    snprintf(bad.target_modules, sizeof bad.target_modules, "q_proj; DROP TABLE");
    CHECK(lg_store_adapter_create(st, "acme", "x", &bad, NULL, &err) == LG_STORE_INVALID);
    CHECK(lg_store_adapter_create(st, "acme", "bad/name", &v1, NULL, &err) == LG_STORE_INVALID);
    CHECK(lg_store_adapter_create(st, "nobody", "x", &v1, NULL, &err) == LG_STORE_NOT_FOUND);

    lg_adapter_rec *list;
    CHECK(lg_store_adapter_list(st, NULL, &list, &n, &err) == 0 && n == 2);
    free(list);
    CHECK(lg_store_adapter_list(st, "acme", &list, &n, &err) == 0 && n == 1);
    free(list);

    /* delete; then the name is free again and starts at version 1 */
    CHECK(lg_store_adapter_delete(st, "acme", "support-bot", &err) == 0);
    CHECK(lg_store_adapter_get(st, "acme", "support-bot", &a2, &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_adapter_delete(st, "acme", "support-bot", &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_adapter_create(st, "acme", "support-bot", &v2, &a2, &err) == 0);
    CHECK(a2.id != a.id && a2.current.version == 1);
}

/* Deleting a tenant revokes its keys and deletes its adapters; the name can
 * be reused; the old row stays readable by id. */
static void test_tenant_delete_cascade(void)
{
    lg_err err = {{0}};
    lg_tenant_spec spec = lg_tenant_spec_init("gone");
    lg_tenant t;
    CHECK(lg_store_tenant_create(st, &spec, &t, &err) == 0);
    char s1[LG_KEY_SECRET_LEN + 1], s2[LG_KEY_SECRET_LEN + 1];
    CHECK(lg_store_key_create(st, "gone", "a", LG_SCOPE_ALL, NULL, s1, &err) == 0);
    CHECK(lg_store_key_create(st, "gone", "b", LG_SCOPE_INFERENCE, NULL, s2, &err) == 0);
    lg_adapter_version v = version_of("gone", 4);
    CHECK(lg_store_adapter_create(st, "gone", "bot", &v, NULL, &err) == 0);
    CHECK(lg_store_adapter_create(st, "gone", "bot2", &v, NULL, &err) == 0);
    lg_api_key k;
    CHECK(lg_store_key_lookup(st, s1, &k, &err) == 0);

    CHECK_MSG(lg_store_tenant_delete(st, "gone", &err) == 0, "%s", err.msg);
    CHECK(lg_store_tenant_delete(st, "gone", &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_tenant_get(st, "gone", &t, &err) == LG_STORE_NOT_FOUND);
    lg_tenant old;
    CHECK(lg_store_tenant_get_by_id(st, t.id, &old, &err) == 0 && old.deleted_at > 0);
    CHECK(lg_store_key_lookup(st, s1, &k, &err) == LG_STORE_NOT_FOUND);
    CHECK(lg_store_key_lookup(st, s2, &k, &err) == LG_STORE_NOT_FOUND);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM api_keys k JOIN tenants t ON t.id = k.tenant_id "
                            "WHERE t.name = 'gone' AND k.revoked_at IS NULL") == 0);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM adapters a JOIN tenants t ON t.id = a.tenant_id "
                            "WHERE t.name = 'gone' AND a.deleted_at IS NULL") == 0);
    CHECK(tu_query_int(dir, "SELECT count(*) FROM adapters a JOIN tenants t ON t.id = a.tenant_id "
                            "WHERE t.name = 'gone'") == 2); /* soft: rows kept */
    lg_key_snapshot *snap;
    CHECK(lg_store_key_snapshot(st, &snap, &err) == 0);
    CHECK(lg_key_snapshot_find(snap, s1, strlen(s1)) == NULL);
    lg_key_snapshot_free(snap);
    lg_adapter_rec *list;
    int n;
    CHECK(lg_store_adapter_list(st, NULL, &list, &n, &err) == 0);
    for (int i = 0; i < n; i++)
        CHECK(strcmp(list[i].tenant_name, "gone") != 0);
    free(list);
    CHECK(lg_store_key_create(st, "gone", "", LG_SCOPE_ALL, NULL, s1, &err) == LG_STORE_NOT_FOUND);

    /* a new tenant may take the name; it sees nothing of the old one */
    lg_tenant t2;
    CHECK(lg_store_tenant_create(st, &spec, &t2, &err) == 0 && t2.id != t.id);
    CHECK(lg_store_adapter_get(st, "gone", "bot", NULL, &err) == LG_STORE_NOT_FOUND);
    lg_tenant *ts;
    CHECK(lg_store_tenant_list(st, true, &ts, &n, &err) == 0);
    int named = 0;
    for (int i = 0; i < n; i++)
        named += !strcmp(ts[i].name, "gone");
    CHECK(named == 2);
    free(ts);
}

static void sha256_hex(const void *a, size_t na, const void *b, size_t nb, char hex[65])
{
    unsigned char md[32];
    unsigned int n;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    EVP_DigestUpdate(c, a, na);
    EVP_DigestUpdate(c, b, nb);
    EVP_DigestFinal_ex(c, md, &n);
    EVP_MD_CTX_free(c);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

static bool file_equals(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char *buf = malloc(len + 1);
    size_t rd = fread(buf, 1, len + 1, f);
    fclose(f);
    bool eq = rd == len && !memcmp(buf, data, len);
    free(buf);
    return eq;
}

static int count_entries(const char *path)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", path);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (p) {
        if (fscanf(p, "%d", &n) != 1)
            n = -1;
        pclose(p);
    }
    return n;
}

static void test_adapter_files(void)
{
    lg_err err = {{0}};
    const char cfg[] = "{\"r\": 8, \"lora_alpha\": 16, \"target_modules\": [\"q_proj\", \"v_proj\"]}";
    size_t wlen = 3 << 20;
    unsigned char *w = malloc(wlen);
    for (size_t i = 0; i < wlen; i++)
        w[i] = (unsigned char)(i * 2654435761u >> 13);
    char want[65], digest[65], rel[LG_ADAPTER_PATH_MAX], path[800];
    sha256_hex(cfg, strlen(cfg), w, wlen, want);

    CHECK_MSG(lg_store_put_adapter_files(dir, cfg, strlen(cfg), w, wlen, digest, rel, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(digest, want));
    char wantrel[80];
    snprintf(wantrel, sizeof wantrel, "adapters/%s", want);
    CHECK(!strcmp(rel, wantrel));
    snprintf(path, sizeof path, "%s/%s/" LG_ADAPTER_CONFIG_FILE, dir, rel);
    CHECK(file_equals(path, cfg, strlen(cfg)));
    snprintf(path, sizeof path, "%s/%s/" LG_ADAPTER_WEIGHTS_FILE, dir, rel);
    CHECK(file_equals(path, w, wlen));
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    CHECK(count_entries(path) == 2);
    /* idempotent */
    CHECK(lg_store_put_adapter_files(dir, cfg, strlen(cfg), w, wlen, digest, rel, &err) == 0 && !strcmp(digest, want));

    /* streamed upload: a temp file renamed into place */
    w[5] ^= 1;
    sha256_hex(cfg, strlen(cfg), w, wlen, want);
    char tmp[700];
    int fd = -1;
    CHECK_MSG(lg_store_tmp_file(dir, tmp, sizeof tmp, &fd, &err) == 0, "%s", err.msg);
    CHECK(write(fd, w, wlen) == (ssize_t)wlen);
    close(fd);
    struct stat sb;
    CHECK(stat(tmp, &sb) == 0);
    ino_t ino = sb.st_ino;
    CHECK_MSG(lg_store_put_adapter_files_from_tmp(dir, cfg, strlen(cfg), tmp, digest, rel, &err) == 0, "%s",
              err.msg);
    CHECK(!strcmp(digest, want));
    CHECK(access(tmp, F_OK) != 0); /* consumed */
    snprintf(path, sizeof path, "%s/%s/" LG_ADAPTER_WEIGHTS_FILE, dir, rel);
    CHECK(file_equals(path, w, wlen));
    CHECK(stat(path, &sb) == 0 && sb.st_ino == ino); /* renamed, not copied */
    /* the same content again: the temp file is removed, nothing changes */
    CHECK(lg_store_tmp_file(dir, tmp, sizeof tmp, &fd, &err) == 0);
    CHECK(write(fd, w, wlen) == (ssize_t)wlen);
    close(fd);
    CHECK(lg_store_put_adapter_files_from_tmp(dir, cfg, strlen(cfg), tmp, digest, rel, &err) == 0);
    CHECK(access(tmp, F_OK) != 0 && !strcmp(digest, want));
    CHECK(stat(path, &sb) == 0 && sb.st_ino == ino);

    /* failures leave nothing behind */
    CHECK(lg_store_put_adapter_files_from_tmp(dir, cfg, strlen(cfg), "/nonexistent/upload", digest, rel, &err) != 0);
    snprintf(path, sizeof path, "%s/tmp", dir);
    CHECK(lg_store_put_adapter_files_from_tmp(dir, cfg, strlen(cfg), path, digest, rel, &err) != 0); /* a dir */
    CHECK(count_entries(path) == 0); /* tmp/ is empty: no put-* leftovers */
    snprintf(path, sizeof path, "%s/adapters", dir);
    CHECK(count_entries(path) == 2);

    /* empty weights are stored too (validation is the caller's job) */
    CHECK(lg_store_put_adapter_files(dir, "{}", 2, NULL, 0, digest, rel, &err) == 0);
    sha256_hex("{}", 2, "", 0, want);
    CHECK(!strcmp(digest, want));
    free(w);
}

static void test_backup_integrity(void)
{
    lg_err err = {{0}};
    CHECK_MSG(lg_store_integrity_check(st, &err) == 0, "%s", err.msg);
    char dest[700];
    snprintf(dest, sizeof dest, "%s/backup.db", dir);
    CHECK_MSG(lg_store_backup(st, dest, &err) == 0, "%s", err.msg);
    CHECK(lg_store_backup(st, dest, &err) == LG_STORE_CONFLICT);
    sqlite3 *db = NULL;
    CHECK(sqlite3_open_v2(dest, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    sqlite3_stmt *s = NULL;
    sqlite3_prepare_v2(db, "SELECT count(*) FROM tenants", -1, &s, NULL);
    CHECK(sqlite3_step(s) == SQLITE_ROW && sqlite3_column_int(s, 0) == tu_query_int(dir, "SELECT count(*) FROM tenants"));
    sqlite3_finalize(s);
    sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &s, NULL);
    CHECK(sqlite3_step(s) == SQLITE_ROW && !strcmp((const char *)sqlite3_column_text(s, 0), "ok"));
    sqlite3_finalize(s);
    sqlite3_close(db);

    /* a reader works for backups and checks too */
    lg_store *r = NULL;
    CHECK(lg_store_open_reader(dir, &r, &err) == 0);
    snprintf(dest, sizeof dest, "%s/backup2.db", dir);
    CHECK_MSG(lg_store_backup(r, dest, &err) == 0, "%s", err.msg);
    CHECK(lg_store_integrity_check(r, &err) == 0);
    lg_store_close(r);
}

/* The auth cache: lookups from several threads while another revokes keys
 * and refreshes; a revoked key fails from the refresh on. */
typedef struct cache_reader {
    lg_key_cache *c;
    const char *secret;
    atomic_int *stop;
    atomic_long found, missing;
} cache_reader;

static void *cache_reader_main(void *arg)
{
    cache_reader *r = arg;
    lg_key_entry e;
    while (!atomic_load(r->stop)) {
        if (lg_key_cache_find(r->c, r->secret, strlen(r->secret), &e))
            atomic_fetch_add(&r->found, 1);
        else
            atomic_fetch_add(&r->missing, 1);
    }
    return NULL;
}

/* Waits until each reader has found the key more than `after[i]` times (a loaded CI machine may
 * not have run the threads yet: the refreshes must not finish before any lookup). */
static void readers_past(cache_reader *rd, const long *after, int n)
{
    for (int i = 0; i < n; i++)
        while (atomic_load(&rd[i].found) <= after[i] && !atomic_load(&rd[i].missing)) sched_yield();
}

static void test_key_cache(void)
{
    char dir[512];
    tu_tmpdir(dir, sizeof dir, "keycache");
    lg_err err = {{0}};
    lg_store *st = NULL;
    CHECK(lg_store_open(dir, &st, &err) == 0);
    if (!st)
        return;
    lg_tenant_spec spec = lg_tenant_spec_init("acme");
    CHECK(lg_store_tenant_create(st, &spec, NULL, &err) == 0);
    char keep[LG_KEY_SECRET_LEN + 1], gone[LG_KEY_SECRET_LEN + 1];
    lg_api_key kk, kg;
    CHECK(lg_store_key_create(st, "acme", "keep", LG_SCOPE_INFERENCE, &kk, keep, &err) == 0);
    CHECK(lg_store_key_create(st, "acme", "gone", LG_SCOPE_ALL, &kg, gone, &err) == 0);
    lg_key_cache *c = NULL;
    CHECK(lg_key_cache_create(st, &c, &err) == 0);
    if (!c)
        return;
    lg_key_entry e;
    CHECK(lg_key_cache_find(c, gone, strlen(gone), &e) && !strcmp(e.id, kg.id) && e.scopes == LG_SCOPE_ALL &&
          !strcmp(e.tenant_name, "acme"));
    atomic_int stop = 0;
    cache_reader rd[2] = {{c, keep, &stop, 0, 0}, {c, keep, &stop, 0, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, cache_reader_main, &rd[i]);
    long seen[2] = {0, 0};
    readers_past(rd, seen, 2);
    for (int i = 0; i < 20; i++) /* refreshes under load */
        CHECK(lg_key_cache_refresh(c, st, &err) == 0);
    for (int i = 0; i < 2; i++) seen[i] = atomic_load(&rd[i].found);
    readers_past(rd, seen, 2); /* and lookups after them */
    CHECK(lg_store_key_revoke(st, kg.id, &err) == 0);
    CHECK(lg_key_cache_find(c, gone, strlen(gone), &e)); /* not refreshed yet */
    CHECK(lg_key_cache_refresh(c, st, &err) == 0);
    CHECK(!lg_key_cache_find(c, gone, strlen(gone), &e));
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK(rd[0].found > 0 && rd[0].missing == 0 && rd[1].found > 0 && rd[1].missing == 0);
    CHECK(lg_key_cache_find(c, keep, strlen(keep), &e) && e.scopes == LG_SCOPE_INFERENCE);
    /* deleting the tenant: its keys stop working at the next refresh */
    CHECK(lg_store_tenant_delete(st, "acme", &err) == 0);
    CHECK(lg_key_cache_refresh(c, st, &err) == 0);
    CHECK(!lg_key_cache_find(c, keep, strlen(keep), &e));
    lg_key_cache_free(c);
    lg_key_cache_free(NULL);
    lg_store_close(st);
    tu_rmtree(dir);
}

int main(void)
{
    lg_err err = {{0}};
    tu_tmpdir(dir, sizeof dir, "store");
    if (lg_store_open(dir, &st, &err)) {
        fprintf(stderr, "open: %s\n", err.msg);
        return 1;
    }
    test_names();
    test_tenants();
    test_keys();
    test_key_entropy();
    test_adapters();
    test_tenant_delete_cascade();
    test_adapter_files();
    test_backup_integrity();
    test_key_cache();
    lg_store_close(st);
    tu_rmtree(dir);
    TEST_DONE();
}
