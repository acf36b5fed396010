/*
 * keys.c — API keys: generation, lookup by secret, revocation, and the
 * in-memory snapshot the gateway authenticates from.
 *
 * A key has a public id ("key_" + 16 base32 characters from 80 random bits:
 * safe to log and to show in usage) and a secret ("lg-" + the 43-character
 * base64url text of 32 random bytes: 256 bits, shown once at creation).
 * The database keeps SHA-256(secret) and the secret's first 11 characters
 * for display; a leaked database gives no usable key. A secret needs no
 * salt or slow hash: it is a uniformly random 256-bit value, not a password.
 *
 * Lookup finds the row by hash (an index), then compares the stored and the
 * computed hash with CRYPTO_memcmp, so the final comparison takes the same
 * time whatever the bytes. All randomness comes from OpenSSL RAND_bytes; a
 * failure of the generator is an error, never a weaker key.
 */
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "db/store_internal.h"

#define LG_KEY_COLS                                                                                             \
    "k.id, k.tenant_id, t.name, k.name, k.scopes, k.secret_prefix, k.created_at, k.revoked_at, k.secret_sha256"
#define LG_KEY_FROM " FROM api_keys k JOIN tenants t ON t.id = k.tenant_id "

/* ---- scopes ------------------------------------------------------------------ */

int lg_store_scopes_parse(const char *text, unsigned *scopes, lg_err *err)
{
    unsigned s = 0;
    const char *p = text ? text : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        unsigned bit = 0;
        if (n == 9 && !strncmp(p, "inference", 9))
            bit = LG_SCOPE_INFERENCE;
        else if (n == 8 && !strncmp(p, "adapters", 8))
            bit = LG_SCOPE_ADAPTERS;
        if (!bit || (s & bit))
            return lg_fail(err, "invalid scopes '%.80s': expected 'inference', 'adapters' or both, comma-separated",
                           text),
                   LG_STORE_INVALID;
        s |= bit;
        p += n;
        if (*p == ',' && *++p == '\0')
            return lg_fail(err, "invalid scopes '%.80s': trailing comma", text), LG_STORE_INVALID;
    }
    if (!s)
        return lg_fail(err, "expected at least one scope ('inference', 'adapters')"), LG_STORE_INVALID;
    *scopes = s;
    return 0;
}

const char *lg_store_scopes_name(unsigned scopes)
{
    switch (scopes) {
    case LG_SCOPE_INFERENCE: return "inference";
    case LG_SCOPE_ADAPTERS: return "adapters";
    case LG_SCOPE_ALL: return "inference,adapters";
    default: return "";
    }
}

/* ---- secrets -------------------------------------------------------------------- */

void lg_store_key_hash(const char *secret, size_t len, uint8_t out[32])
{
    unsigned int n = 0;
    /* EVP_Digest with SHA-256 cannot fail short of memory exhaustion inside
     * OpenSSL; then the hash is all zeros, which no stored key has */
    if (!EVP_Digest(secret, len, out, &n, EVP_sha256(), NULL) || n != 32)
        memset(out, 0, 32);
}

/* base64url without padding: 32 bytes -> 43 characters */
static void lg_base64url(const uint8_t *in, size_t n, char *out)
{
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = A[v >> 18 & 63], out[o++] = A[v >> 12 & 63], out[o++] = A[v >> 6 & 63], out[o++] = A[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = A[v >> 18 & 63], out[o++] = A[v >> 12 & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = A[v >> 18 & 63], out[o++] = A[v >> 12 & 63], out[o++] = A[v >> 6 & 63];
    }
    out[o] = '\0';
}

/* base32 (RFC 4648 alphabet, lower case): 10 bytes -> 16 characters */
static void lg_base32(const uint8_t *in, size_t n, char *out)
{
    static const char A[] = "abcdefghijklmnopqrstuvwxyz234567";
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        acc = acc << 8 | in[i];
        bits += 8;
        while (bits >= 5) {
            out[o++] = A[(acc >> (bits - 5)) & 31];
            bits -= 5;
        }
    }
    if (bits > 0)
        out[o++] = A[(acc << (5 - bits)) & 31];
    out[o] = '\0';
}

static bool lg_secret_shape_ok(const char *secret, size_t len)
{
    return secret && len == LG_KEY_SECRET_LEN && !memcmp(secret, "lg-", 3);
}

static void lg_read_key(sqlite3_stmt *s, lg_api_key *k)
{
    memset(k, 0, sizeof *k);
    lg_st_col_text(s, 0, k->id, sizeof k->id);
    k->tenant_id = sqlite3_column_int64(s, 1);
    lg_st_col_text(s, 2, k->tenant_name, sizeof k->tenant_name);
    lg_st_col_text(s, 3, k->name, sizeof k->name);
    k->scopes = (unsigned)sqlite3_column_int(s, 4);
    lg_st_col_text(s, 5, k->prefix, sizeof k->prefix);
    k->created_at = sqlite3_column_int64(s, 6);
    k->revoked_at = lg_st_col_i64(s, 7, 0);
}

static int lg_check_key_name(const char *name, lg_err *err)
{
    size_t n = strlen(name);
    if (n > 63)
        return lg_fail(err, "key name too long (%zu bytes, at most 63)", n), LG_STORE_INVALID;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return lg_fail(err, "key name contains a control character"), LG_STORE_INVALID;
    return 0;
}

static int lg_key_create_locked(lg_store *st, const char *tenant, const char *name, unsigned scopes, lg_api_key *out,
                                char secret_out[LG_KEY_SECRET_LEN + 1], lg_err *err)
{
    int rc;
    if (!name)
        name = "";
    if ((rc = lg_st_check_writable(st, "creating a key", err)) || (rc = lg_check_key_name(name, err)))
        return rc;
    if (scopes < 1 || scopes > LG_SCOPE_ALL)
        return lg_fail(err, "invalid scope set %u: expected inference, adapters or both", scopes), LG_STORE_INVALID;
    if ((rc = lg_st_begin(st, err)))
        return rc;
    int64_t tenant_id;
    if ((rc = lg_st_tenant_id(st, tenant, &tenant_id, err))) {
        lg_st_rollback(st);
        return rc;
    }
    uint8_t raw[32], idraw[10], hash[32];
    char secret[LG_KEY_SECRET_LEN + 1], id[LG_KEY_ID_LEN + 1], prefix[LG_KEY_PREFIX_LEN + 1];
    sqlite3_stmt *s = NULL;
    if ((rc = lg_st_prepare(st,
                            "INSERT INTO api_keys (id, tenant_id, name, scopes, secret_sha256, secret_prefix, "
                            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                            &s, err))) {
        lg_st_rollback(st);
        return rc;
    }
    /* an id or hash collision is astronomically unlikely; retry anyway */
    for (int attempt = 0;; attempt++) {
        if (RAND_bytes(raw, sizeof raw) != 1 || RAND_bytes(idraw, sizeof idraw) != 1) {
            rc = (lg_fail(err, "the random generator failed (OpenSSL RAND_bytes): no key created"), LG_STORE_ERROR);
            break;
        }
        memcpy(secret, "lg-", 3);
        lg_base64url(raw, sizeof raw, secret + 3);
        memcpy(id, "key_", 4);
        lg_base32(idraw, sizeof idraw, id + 4);
        memcpy(prefix, secret, LG_KEY_PREFIX_LEN);
        prefix[LG_KEY_PREFIX_LEN] = '\0';
        lg_store_key_hash(secret, LG_KEY_SECRET_LEN, hash);
        sqlite3_reset(s);
        sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, tenant_id);
        sqlite3_bind_text(s, 3, name, -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 4, (int)scopes);
        sqlite3_bind_blob(s, 5, hash, 32, SQLITE_STATIC);
        sqlite3_bind_text(s, 6, prefix, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 7, lg_db_now_ms());
        int step = sqlite3_step(s);
        if (step == SQLITE_DONE) {
            rc = 0;
            break;
        }
        if ((step & 0xff) != SQLITE_CONSTRAINT || attempt >= 2) {
            rc = lg_st_fail(st, err, "inserting a key");
            break;
        }
    }
    sqlite3_finalize(s);
    OPENSSL_cleanse(raw, sizeof raw);
    if (rc || (rc = lg_st_commit(st, err))) {
        lg_st_rollback(st);
        OPENSSL_cleanse(secret, sizeof secret);
        return rc;
    }
    if (out) {
        sqlite3_stmt *q;
        if ((rc = lg_st_prepare(st, "SELECT " LG_KEY_COLS LG_KEY_FROM "WHERE k.id = ?", &q, err)) == 0) {
            sqlite3_bind_text(q, 1, id, -1, SQLITE_STATIC);
            if (sqlite3_step(q) == SQLITE_ROW)
                lg_read_key(q, out);
            else
                rc = lg_st_fail(st, err, "reading the new key");
            sqlite3_finalize(q);
        }
    }
    memcpy(secret_out, secret, sizeof secret);
    OPENSSL_cleanse(secret, sizeof secret);
    return rc;
}

int lg_store_key_create(lg_store *st, const char *tenant, const char *name, unsigned scopes, lg_api_key *out,
                        char secret_out[LG_KEY_SECRET_LEN + 1], lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_key_create_locked(st, tenant, name, scopes, out, secret_out, err);
    lg_st_unlock(st);
    return rc;
}

static int lg_key_lookup_locked(lg_store *st, const char *secret, lg_api_key *out, lg_err *err)
{
    size_t len = secret ? strlen(secret) : 0;
    if (!lg_secret_shape_ok(secret, len))
        return lg_fail(err, "invalid API key"), LG_STORE_NOT_FOUND;
    uint8_t hash[32];
    lg_store_key_hash(secret, len, hash);
    sqlite3_stmt *s;
    int rc = lg_st_prepare(st,
                           "SELECT " LG_KEY_COLS LG_KEY_FROM
                           "WHERE k.secret_sha256 = ? AND k.revoked_at IS NULL AND t.deleted_at IS NULL",
                           &s, err);
    if (rc)
        return rc;
    sqlite3_bind_blob(s, 1, hash, 32, SQLITE_STATIC);
    int step = sqlite3_step(s);
    if (step == SQLITE_ROW) {
        const void *stored = sqlite3_column_blob(s, 8);
        if (stored && sqlite3_column_bytes(s, 8) == 32 && CRYPTO_memcmp(stored, hash, 32) == 0)
            lg_read_key(s, out);
        else
            rc = (lg_fail(err, "invalid API key"), LG_STORE_NOT_FOUND);
    } else if (step == SQLITE_DONE) {
        rc = (lg_fail(err, "invalid API key"), LG_STORE_NOT_FOUND);
    } else {
        rc = lg_st_fail(st, err, "looking up a key");
    }
    sqlite3_finalize(s);
    return rc;
}

int lg_store_key_lookup(lg_store *st, const char *secret, lg_api_key *out, lg_err *err)
{
    lg_st_lock(st);
    int rc = lg_key_lookup_locked(st, secret, out, err);
    lg_st_unlock(st);
    return rc;
}

int lg_store_key_revoke(lg_store *st, const char *key_id, lg_err *err)
{
    lg_st_lock(st);
    sqlite3_stmt *s = NULL;
    int rc;
    if (!(rc = lg_st_check_writable(st, "revoking a key", err)) &&
        !(rc = lg_st_prepare(st, "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", &s, err))) {
        sqlite3_bind_int64(s, 1, lg_db_now_ms());
        sqlite3_bind_text(s, 2, key_id ? key_id : "", -1, SQLITE_STATIC);
        if (sqlite3_step(s) != SQLITE_DONE)
            rc = lg_st_fail(st, err, "revoking a key");
        else if (sqlite3_changes(st->db) == 0)
            rc = (lg_fail(err, "no live key with id '%.40s'", key_id ? key_id : ""), LG_STORE_NOT_FOUND);
    }
    sqlite3_finalize(s);
    lg_st_unlock(st);
    return rc;
}

static int lg_key_list_locked(lg_store *st, const char *tenant, bool include_revoked, lg_api_key **out, int *n,
                              lg_err *err)
{
    int64_t tenant_id = 0;
    int rc;
    if (tenant && (rc = lg_st_tenant_id(st, tenant, &tenant_id, err)))
        return rc;
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT " LG_KEY_COLS LG_KEY_FROM "WHERE (?1 = 0 OR k.tenant_id = ?1) %s "
             "ORDER BY k.created_at, k.rowid", include_revoked ? "" : "AND k.revoked_at IS NULL");
    sqlite3_stmt *s;
    if ((rc = lg_st_prepare(st, sql, &s, err)))
        return rc;
    sqlite3_bind_int64(s, 1, tenant_id);
    lg_api_key *arr = NULL;
    int cap = 0, cnt = 0, step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (lg_st_grow((void **)&arr, &cap, cnt, sizeof *arr, err)) {
            step = SQLITE_NOMEM;
            break;
        }
        lg_read_key(s, &arr[cnt++]);
    }
    if (step != SQLITE_DONE) {
        if (step != SQLITE_NOMEM)
            lg_st_fail(st, err, "listing keys");
        sqlite3_finalize(s);
        free(arr);
        return LG_STORE_ERROR;
    }
    sqlite3_finalize(s);
    *out = arr;
    *n = cnt;
    return 0;
}

int lg_store_key_list(lg_store *st, const char *tenant, bool include_revoked, lg_api_key **out, int *n, lg_err *err)
{
    *out = NULL;
    *n = 0;
    lg_st_lock(st);
    int rc = lg_key_list_locked(st, tenant, include_revoked, out, n, err);
    lg_st_unlock(st);
    return rc;
}

/* ---- snapshot ------------------------------------------------------------------ */

struct lg_key_snapshot {
    int n;
    lg_key_entry *entries; /* sorted by hash */
};

static int lg_entry_cmp(const void *a, const void *b)
{
    return memcmp(((const lg_key_entry *)a)->hash, ((const lg_key_entry *)b)->hash, 32);
}

static int lg_snapshot_locked(lg_store *st, lg_key_snapshot *snap, lg_err *err)
{
    sqlite3_stmt *s;
    int rc = lg_st_prepare(st,
                           "SELECT k.secret_sha256, k.id, k.tenant_id, t.name, k.scopes" LG_KEY_FROM
                           "WHERE k.revoked_at IS NULL AND t.deleted_at IS NULL",
                           &s, err);
    if (rc)
        return rc;
    int cap = 0, step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        if (sqlite3_column_bytes(s, 0) != 32)
            continue; /* the schema's CHECK makes this impossible */
        if (lg_st_grow((void **)&snap->entries, &cap, snap->n, sizeof *snap->entries, err)) {
            step = SQLITE_NOMEM;
            break;
        }
        lg_key_entry *e = &snap->entries[snap->n++];
        memset(e, 0, sizeof *e);
        memcpy(e->hash, sqlite3_column_blob(s, 0), 32);
        lg_st_col_text(s, 1, e->id, sizeof e->id);
        e->tenant_id = sqlite3_column_int64(s, 2);
        lg_st_col_text(s, 3, e->tenant_name, sizeof e->tenant_name);
        e->scopes = (unsigned)sqlite3_column_int(s, 4);
    }
    sqlite3_finalize(s);
    if (step != SQLITE_DONE)
        return step == SQLITE_NOMEM ? LG_STORE_ERROR : lg_st_fail(st, err, "reading keys");
    if (snap->n > 1)
        qsort(snap->entries, (size_t)snap->n, sizeof *snap->entries, lg_entry_cmp);
    return 0;
}

int lg_store_key_snapshot(lg_store *st, lg_key_snapshot **out, lg_err *err)
{
    *out = NULL;
    lg_key_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap)
        return lg_fail(err, "out of memory");
    lg_st_lock(st);
    int rc = lg_snapshot_locked(st, snap, err);
    lg_st_unlock(st);
    if (rc) {
        lg_key_snapshot_free(snap);
        return rc;
    }
    *out = snap;
    return 0;
}

const lg_key_entry *lg_key_snapshot_find(const lg_key_snapshot *s, const char *secret, size_t len)
{
    if (!s || !lg_secret_shape_ok(secret, len))
        return NULL;
    /* The search orders SHA-256 values of the caller's guess: its timing
     * tells nothing about any stored secret (the guess's hash is not
     * chosen by the caller). The final equality is the constant-time one. */
    uint8_t hash[32];
    lg_store_key_hash(secret, len, hash);
    int lo = 0, hi = s->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = memcmp(hash, s->entries[mid].hash, 32);
        if (c == 0)
            return CRYPTO_memcmp(hash, s->entries[mid].hash, 32) == 0 ? &s->entries[mid] : NULL;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

int lg_key_snapshot_count(const lg_key_snapshot *s) { return s ? s->n : 0; }

const lg_key_entry *lg_key_snapshot_entry(const lg_key_snapshot *s, int i)
{
    return s && i >= 0 && i < s->n ? &s->entries[i] : NULL;
}

void lg_key_snapshot_free(lg_key_snapshot *s)
{
    if (!s)
        return;
    free(s->entries);
    free(s);
}

/* ---- the cache ------------------------------------------------------------------ */

struct lg_key_cache {
    pthread_rwlock_t lock;
    lg_key_snapshot *snap; /* never NULL */
};

int lg_key_cache_create(lg_store *st, lg_key_cache **out, lg_err *err)
{
    *out = NULL;
    lg_key_cache *c = calloc(1, sizeof *c);
    if (!c)
        return lg_fail(err, "out of memory");
    int rc = lg_store_key_snapshot(st, &c->snap, err);
    if (rc) {
        free(c);
        return rc;
    }
    pthread_rwlock_init(&c->lock, NULL);
    *out = c;
    return 0;
}

int lg_key_cache_refresh(lg_key_cache *c, lg_store *st, lg_err *err)
{
    lg_key_snapshot *fresh = NULL;
    int rc = lg_store_key_snapshot(st, &fresh, err);
    if (rc)
        return rc;
    pthread_rwlock_wrlock(&c->lock);
    lg_key_snapshot *old = c->snap;
    c->snap = fresh;
    pthread_rwlock_unlock(&c->lock);
    lg_key_snapshot_free(old);
    return 0;
}

bool lg_key_cache_find(lg_key_cache *c, const char *secret, size_t len, lg_key_entry *out)
{
    pthread_rwlock_rdlock(&c->lock);
    const lg_key_entry *e = lg_key_snapshot_find(c->snap, secret, len);
    if (e)
        *out = *e;
    pthread_rwlock_unlock(&c->lock);
    return e != NULL;
}

void lg_key_cache_free(lg_key_cache *c)
{
    if (!c)
        return;
    lg_key_snapshot_free(c->snap);
    pthread_rwlock_destroy(&c->lock);
    free(c);
}
