/*
 * store.h — the SQLite store: tenants, API keys, adapters and their
 * versions, server settings, backup and integrity checks.
 *
 * One database file, DATA_DIR/loragate.db, in WAL mode with
 * synchronous=FULL and foreign keys on. The schema is the numbered files
 * db/migrations/NNNN_*.sql, embedded into the binary at build time;
 * lg_store_open applies the missing ones in one transaction and refuses a
 * database written by a newer loragate (db/schema.h).
 *
 * Handles. An lg_store is one SQLite connection:
 *   - lg_store_open: read-write, for admin writes (create tenant, key,
 *     adapter version, ...). Writes wait for fsync, so call them from a
 *     worker thread, never from an event loop.
 *   - lg_store_open_reader: read-only, for lookups and usage queries. In WAL
 *     mode a reader never blocks the ledger writer and is never blocked by
 *     it. Open one per thread that reads (opening costs well under a ms).
 * Every call on a handle is serialized by a mutex inside it, so a handle may
 * be shared, but one handle per thread avoids waiting. The usage ledger has
 * its own connection and thread (db/ledger.h).
 *
 * Soft deletes. Nothing is ever deleted: a tenant, key or adapter gets a
 * deleted_at / revoked_at time, so usage records keep naming real rows.
 * Deleting a tenant revokes its keys and deletes its adapters in the same
 * transaction. Names are unique among live rows only; a deleted name can be
 * reused.
 *
 * Errors. Functions return 0 on success and a negative lg_store status on
 * failure, with one line in err: LG_STORE_ERROR (-1: database or I/O
 * failure), LG_STORE_NOT_FOUND, LG_STORE_CONFLICT, LG_STORE_INVALID (bad
 * argument). The statuses map to HTTP 500/404/409/400. Library code never
 * exits.
 *
 * Times are Unix milliseconds (UTC). Money is integers (db/money.h).
 * Arrays returned through `T **out, int *n` are one malloc block: free(*out).
 */
#ifndef LG_STORE_H
#define LG_STORE_H

#include "engine/base/common.h"
#include "db/money.h"

typedef struct lg_store lg_store;

enum {
    LG_STORE_OK = 0,
    LG_STORE_ERROR = -1,     /* database or I/O error */
    LG_STORE_NOT_FOUND = -2, /* no such (live) tenant, key, adapter */
    LG_STORE_CONFLICT = -3,  /* the name is taken */
    LG_STORE_INVALID = -4,   /* a bad argument (name, scopes, price, ...) */
};

#define LG_STORE_DB_FILE "loragate.db" /* inside DATA_DIR */

/* ---- handles ------------------------------------------------------------ */

/* Opens (creating if needed) DATA_DIR/loragate.db read-write and migrates
 * it. Creates DATA_DIR itself if it is missing (not its parents). */
int lg_store_open(const char *data_dir, lg_store **out, lg_err *err);
/* Opens an existing, up-to-date database read-only. */
int lg_store_open_reader(const char *data_dir, lg_store **out, lg_err *err);
void lg_store_close(lg_store *st); /* NULL: no-op */

const char *lg_store_data_dir(const lg_store *st);
/* The schema version this binary writes (the number of migrations). */
int lg_store_schema_latest(void);

/* ---- names -------------------------------------------------------------- */

#define LG_STORE_NAME_MAX 64 /* buffer size for tenant, adapter and key names */

/* Tenant names are DNS labels, [a-z0-9]([a-z0-9-]{0,61}[a-z0-9])? (they are
 * the slug of /t/<tenant>/ URLs and the label of <tenant>.<suffix> Hosts):
 * the router's rule, lg_tenant_slug_valid. LG_STORE_TENANT_NAME_RULE says
 * it in words, for error messages. */
#define LG_STORE_TENANT_NAME_RULE                                                                            \
    "a tenant name is 1 to 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit " \
    "(a DNS label: it is used in /t/<name>/v1 URLs and as a Host name label)"
int lg_store_check_tenant_name(const char *name, lg_err *err);
/* Adapter names: [A-Za-z0-9][A-Za-z0-9._-]{0,62} (the `model` clients send). */
int lg_store_check_adapter_name(const char *name, lg_err *err);

/* ---- tenants ------------------------------------------------------------ */

#define LG_UNLIMITED (-1)

typedef struct lg_tenant_limits {
    int64_t rpm;            /* requests per minute */
    int64_t tpm;            /* tokens (prompt + completion) per minute */
    int64_t concurrent;     /* requests in flight */
    int64_t monthly_tokens; /* tokens per calendar month (UTC) */
} lg_tenant_limits;         /* each >= 0, or LG_UNLIMITED */

typedef struct lg_tenant_spec {
    const char *name;   /* create only; update ignores it */
    int32_t weight;     /* fair-share weight, >= 1 */
    bool has_pricing;   /* false: the server default pricing applies */
    lg_pricing pricing;
    lg_tenant_limits limits;
} lg_tenant_spec;

/* name, weight 1, server pricing, no limits. Start every spec from this. */
lg_tenant_spec lg_tenant_spec_init(const char *name);

typedef struct lg_tenant {
    int64_t id;
    char name[LG_STORE_NAME_MAX];
    int64_t created_at;
    int64_t deleted_at; /* 0: live */
    int32_t weight;
    bool has_pricing;
    lg_pricing pricing; /* valid when has_pricing */
    lg_tenant_limits limits;
} lg_tenant;

/* CONFLICT when a live tenant has the name. out may be NULL. */
int lg_store_tenant_create(lg_store *st, const lg_tenant_spec *spec, lg_tenant *out, lg_err *err);
/* Replaces weight, pricing and limits of the live tenant `name` with spec's
 * (read, change, write back for a partial update). out may be NULL. */
int lg_store_tenant_update(lg_store *st, const char *name, const lg_tenant_spec *spec, lg_tenant *out, lg_err *err);
/* The live tenant of that name. */
int lg_store_tenant_get(lg_store *st, const char *name, lg_tenant *out, lg_err *err);
/* Any tenant, live or deleted (for usage pages that name old tenants). */
int lg_store_tenant_get_by_id(lg_store *st, int64_t id, lg_tenant *out, lg_err *err);
/* Ordered by name, then id. */
int lg_store_tenant_list(lg_store *st, bool include_deleted, lg_tenant **out, int *n, lg_err *err);
/* Soft-deletes the tenant, revokes its keys and deletes its adapters, in one
 * transaction. */
int lg_store_tenant_delete(lg_store *st, const char *name, lg_err *err);

/* ---- settings ------------------------------------------------------------ */

int lg_store_default_pricing_get(lg_store *st, lg_pricing *out, lg_err *err);
int lg_store_default_pricing_set(lg_store *st, const lg_pricing *p, lg_err *err);
/* The pricing that applies to a tenant now: its own, or the default. */
int lg_store_effective_pricing(lg_store *st, int64_t tenant_id, lg_pricing *out, lg_err *err);

/* ---- API keys ------------------------------------------------------------ */

enum {
    LG_SCOPE_INFERENCE = 1, /* /v1/chat/completions, /v1/completions, /v1/models */
    LG_SCOPE_ADAPTERS = 2,  /* the tenant's own adapter uploads */
    LG_SCOPE_ALL = 3,
};
/* "inference", "adapters", "inference,adapters" (any order, no repeats). */
int lg_store_scopes_parse(const char *text, unsigned *scopes, lg_err *err);
/* The canonical text of a valid scope set ("inference,adapters"); "" if
 * invalid. Static storage. */
const char *lg_store_scopes_name(unsigned scopes);

enum {
    LG_KEY_ID_LEN = 20,     /* "key_" + 16 base32 chars (80 random bits): public */
    LG_KEY_SECRET_LEN = 46, /* "lg-" + 43 base64url chars (32 random bytes) */
    LG_KEY_PREFIX_LEN = 11, /* "lg-" + 8: what listings show of a secret */
};

typedef struct lg_api_key {
    char id[LG_KEY_ID_LEN + 1];
    int64_t tenant_id;
    char tenant_name[LG_STORE_NAME_MAX];
    char name[LG_STORE_NAME_MAX]; /* free text, may be "" */
    unsigned scopes;
    char prefix[LG_KEY_PREFIX_LEN + 1];
    int64_t created_at;
    int64_t revoked_at; /* 0: live */
} lg_api_key;

/* Creates a key for the live tenant. The secret (OpenSSL RAND_bytes, 256
 * bits) is written to secret_out once and never stored: only its SHA-256 and
 * its first LG_KEY_PREFIX_LEN characters are. name: up to 63 bytes, no
 * control characters. out may be NULL. */
int lg_store_key_create(lg_store *st, const char *tenant, const char *name, unsigned scopes, lg_api_key *out,
                        char secret_out[LG_KEY_SECRET_LEN + 1], lg_err *err);
/* The live key (of a live tenant) whose secret this is; NOT_FOUND for
 * unknown, malformed and revoked secrets alike. Hashes compared with
 * CRYPTO_memcmp. */
int lg_store_key_lookup(lg_store *st, const char *secret, lg_api_key *out, lg_err *err);
/* NOT_FOUND if no such key or already revoked. */
int lg_store_key_revoke(lg_store *st, const char *key_id, lg_err *err);
/* tenant NULL: keys of all tenants. Ordered by creation. */
int lg_store_key_list(lg_store *st, const char *tenant, bool include_revoked, lg_api_key **out, int *n, lg_err *err);
/* SHA-256 of a secret (what the database stores). */
void lg_store_key_hash(const char *secret, size_t len, uint8_t out[32]);

/* Auth cache: every live key of every live tenant, as an immutable
 * in-memory table sorted by secret hash. Build one after each admin change
 * and swap it in; lookups in a snapshot are thread-safe and touch no disk. */
typedef struct lg_key_snapshot lg_key_snapshot;
typedef struct lg_key_entry {
    uint8_t hash[32]; /* SHA-256 of the secret */
    char id[LG_KEY_ID_LEN + 1];
    int64_t tenant_id;
    char tenant_name[LG_STORE_NAME_MAX];
    unsigned scopes;
} lg_key_entry;
int lg_store_key_snapshot(lg_store *st, lg_key_snapshot **out, lg_err *err);
/* NULL when no live key has this secret. */
const lg_key_entry *lg_key_snapshot_find(const lg_key_snapshot *s, const char *secret, size_t len);
int lg_key_snapshot_count(const lg_key_snapshot *s);
const lg_key_entry *lg_key_snapshot_entry(const lg_key_snapshot *s, int i);
void lg_key_snapshot_free(lg_key_snapshot *s); /* NULL: no-op */

/* The auth cache the gateway's event loops use: the current snapshot behind
 * a read-write lock. lg_key_cache_find is safe from any number of threads
 * at once and touches no disk (one SHA-256 and a binary search, about a
 * microsecond). After every admin change that affects keys (key created or
 * revoked, tenant deleted) call lg_key_cache_refresh from the thread that
 * made it: it builds the new snapshot from that store handle outside the
 * lock, then swaps it in, so the change holds on every thread from the
 * next lookup on. A failed refresh keeps the old snapshot. */
typedef struct lg_key_cache lg_key_cache;
int lg_key_cache_create(lg_store *st, lg_key_cache **out, lg_err *err);
int lg_key_cache_refresh(lg_key_cache *c, lg_store *st, lg_err *err);
/* true and *out filled (a copy) when a live key has this secret. */
bool lg_key_cache_find(lg_key_cache *c, const char *secret, size_t len, lg_key_entry *out);
void lg_key_cache_free(lg_key_cache *c); /* NULL: no-op */

/* ---- adapters ------------------------------------------------------------ */

enum {
    LG_ADAPTER_PATH_MAX = 96,     /* "adapters/<64 hex>" + NUL fits */
    LG_ADAPTER_TARGETS_MAX = 128, /* "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" fits */
};

/* One uploaded content of an adapter. As input (create/replace) only
 * digest, path, size_bytes, max_rank and target_modules are read; the
 * files must already be in place (lg_store_put_adapter_files). */
typedef struct lg_adapter_version {
    int64_t id;
    int32_t version;               /* 1, 2, ... per adapter */
    char digest[65];               /* SHA-256 hex of adapter_config.json || adapter_model.safetensors */
    char path[LG_ADAPTER_PATH_MAX]; /* relative to DATA_DIR: "adapters/<digest>" */
    int64_t size_bytes;
    int32_t max_rank;
    char target_modules[LG_ADAPTER_TARGETS_MAX]; /* "q_proj,v_proj" */
    int64_t created_at;
} lg_adapter_version;

typedef struct lg_adapter_rec {
    int64_t id;
    int64_t tenant_id;
    char tenant_name[LG_STORE_NAME_MAX];
    char name[LG_STORE_NAME_MAX];
    int64_t created_at;
    int64_t updated_at; /* when the current version last changed */
    int64_t deleted_at; /* 0: live */
    lg_adapter_version current;
} lg_adapter_rec;

/* A new adapter of the live tenant with version 1 current. CONFLICT when the
 * tenant has a live adapter of that name. out may be NULL. */
int lg_store_adapter_create(lg_store *st, const char *tenant, const char *name, const lg_adapter_version *v,
                            lg_adapter_rec *out, lg_err *err);
/* Adds a version to the live adapter and makes it current, atomically.
 * NOT_FOUND when there is no live adapter of that name. out may be NULL. */
int lg_store_adapter_replace(lg_store *st, const char *tenant, const char *name, const lg_adapter_version *v,
                             lg_adapter_rec *out, lg_err *err);
int lg_store_adapter_get(lg_store *st, const char *tenant, const char *name, lg_adapter_rec *out, lg_err *err);
/* Live adapters; tenant NULL: of all live tenants. Ordered by tenant, name. */
int lg_store_adapter_list(lg_store *st, const char *tenant, lg_adapter_rec **out, int *n, lg_err *err);
/* Every version of the live adapter, oldest first. */
int lg_store_adapter_versions(lg_store *st, const char *tenant, const char *name, lg_adapter_version **out, int *n,
                              lg_err *err);
int lg_store_adapter_delete(lg_store *st, const char *tenant, const char *name, lg_err *err);

/* ---- maintenance ---------------------------------------------------------- */

/* Online backup (sqlite3_backup) of a consistent snapshot of the live
 * database into dest_path (written to dest_path.tmp, fsynced, renamed). The
 * ledger keeps writing meanwhile. Refuses an existing dest_path. */
int lg_store_backup(lg_store *st, const char *dest_path, lg_err *err);
/* PRAGMA integrity_check: 0 when "ok", else -1 with its first lines. */
int lg_store_integrity_check(lg_store *st, lg_err *err);

#endif
