-- 0001_initial.sql — tenants, API keys, adapters and their versions, server
-- settings: what the admin API writes. All times are Unix milliseconds (UTC).
-- Money is integer micro-USD per million tokens (db/money.h). Rows are never
-- deleted: tenants, keys and adapters are soft-deleted (deleted_at /
-- revoked_at), so usage records keep pointing at real rows forever.

PRAGMA application_id = 1279738946; -- 0x4C474442 'LGDB': a loragate database

CREATE TABLE tenants (
    id                   INTEGER PRIMARY KEY,
    name                 TEXT    NOT NULL CHECK (length(name) BETWEEN 1 AND 63),
    created_at           INTEGER NOT NULL,
    deleted_at           INTEGER,                           -- NULL: live
    weight               INTEGER NOT NULL DEFAULT 1 CHECK (weight >= 1), -- fair-share weight
    -- pricing, micro-USD per 1M tokens; all three NULL: the server default
    price_input          INTEGER CHECK (price_input >= 0),
    price_cached_input   INTEGER CHECK (price_cached_input >= 0),
    price_output         INTEGER CHECK (price_output >= 0),
    -- limits; NULL: unlimited
    limit_rpm            INTEGER CHECK (limit_rpm >= 0),            -- requests per minute
    limit_tpm            INTEGER CHECK (limit_tpm >= 0),            -- tokens per minute
    limit_concurrent     INTEGER CHECK (limit_concurrent >= 0),     -- requests in flight
    limit_monthly_tokens INTEGER CHECK (limit_monthly_tokens >= 0), -- per calendar month (UTC)
    CHECK ((price_input IS NULL) = (price_cached_input IS NULL) AND
           (price_input IS NULL) = (price_output IS NULL))
) STRICT;
-- a name is unique among live tenants; a deleted tenant's name can be reused
CREATE UNIQUE INDEX tenants_live_name ON tenants (name) WHERE deleted_at IS NULL;

CREATE TABLE api_keys (
    id            TEXT    PRIMARY KEY NOT NULL,    -- public: 'key_' + 16 base32 chars
    tenant_id     INTEGER NOT NULL REFERENCES tenants (id),
    name          TEXT    NOT NULL DEFAULT '',
    scopes        INTEGER NOT NULL CHECK (scopes BETWEEN 1 AND 3), -- bit 0 inference, bit 1 adapters
    secret_sha256 BLOB    NOT NULL UNIQUE CHECK (length(secret_sha256) = 32), -- the secret is never stored
    secret_prefix TEXT    NOT NULL,                -- first characters of the secret, for display
    created_at    INTEGER NOT NULL,
    revoked_at    INTEGER                          -- NULL: live
) STRICT;
CREATE INDEX api_keys_tenant ON api_keys (tenant_id);

CREATE TABLE adapters (
    id                 INTEGER PRIMARY KEY,
    tenant_id          INTEGER NOT NULL REFERENCES tenants (id),
    name               TEXT    NOT NULL,
    current_version_id INTEGER REFERENCES adapter_versions (id), -- NULL only inside the creating transaction
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,           -- last time current_version_id changed
    deleted_at         INTEGER                     -- NULL: live
) STRICT;
CREATE UNIQUE INDEX adapters_live_name ON adapters (tenant_id, name) WHERE deleted_at IS NULL;

-- one row per upload; the files live in DATA_DIR/<path> (content-addressed:
-- adapters/<digest>/{adapter_config.json,adapter_model.safetensors})
CREATE TABLE adapter_versions (
    id             INTEGER PRIMARY KEY,
    adapter_id     INTEGER NOT NULL REFERENCES adapters (id),
    version        INTEGER NOT NULL CHECK (version >= 1), -- 1, 2, ... per adapter
    digest         TEXT    NOT NULL CHECK (length(digest) = 64), -- SHA-256 hex of config || weights
    path           TEXT    NOT NULL,
    size_bytes     INTEGER NOT NULL CHECK (size_bytes >= 0),
    max_rank       INTEGER NOT NULL CHECK (max_rank >= 1),
    target_modules TEXT    NOT NULL,               -- comma-separated, e.g. 'q_proj,v_proj'
    created_at     INTEGER NOT NULL,
    UNIQUE (adapter_id, version)
) STRICT;
CREATE INDEX adapter_versions_digest ON adapter_versions (digest);

-- exactly one row
CREATE TABLE server_settings (
    id                 INTEGER PRIMARY KEY CHECK (id = 1),
    price_input        INTEGER NOT NULL DEFAULT 0 CHECK (price_input >= 0),
    price_cached_input INTEGER NOT NULL DEFAULT 0 CHECK (price_cached_input >= 0),
    price_output       INTEGER NOT NULL DEFAULT 0 CHECK (price_output >= 0)
) STRICT;
INSERT INTO server_settings (id) VALUES (1);
