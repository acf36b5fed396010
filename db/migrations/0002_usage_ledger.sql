-- 0002_usage_ledger.sql — the usage ledger: one row per request that
-- started, written by the ledger thread (db/ledger.c) in group commits.
--
-- Append-only (the triggers below refuse UPDATE and DELETE). No counter rows:
-- every aggregate is a SUM over these records. Idempotent on request_id (the
-- writer inserts with ON CONFLICT (request_id) DO NOTHING). No foreign keys on
-- purpose: an insert must never fail because of admin state; tenant_id and
-- key_id name rows that are never deleted (tenants and keys are soft-deleted).
-- Times are Unix milliseconds (UTC); cost is pico-USD (1e-12 USD).

CREATE TABLE usage_records (
    request_id        TEXT    PRIMARY KEY NOT NULL CHECK (length(request_id) BETWEEN 1 AND 127),
    tenant_id         INTEGER,                 -- NULL: the request never authenticated
    key_id            TEXT,
    route             TEXT    NOT NULL,        -- e.g. 'chat.completions'
    model             TEXT    NOT NULL,        -- the model name the client asked for
    adapter_name      TEXT,                    -- NULL: the base model
    adapter_digest    TEXT,                    -- NULL: the base model
    prompt_tokens     INTEGER NOT NULL CHECK (prompt_tokens >= 0),       -- including cached
    cached_tokens     INTEGER NOT NULL CHECK (cached_tokens BETWEEN 0 AND prompt_tokens),
    completion_tokens INTEGER NOT NULL CHECK (completion_tokens >= 0),
    finish_reason     TEXT,                    -- 'stop', 'length', ...; NULL: none
    http_status       INTEGER NOT NULL,
    error_type        TEXT,                    -- OpenAI error type; NULL: success
    received_at       INTEGER NOT NULL CHECK (received_at >= 0),
    first_token_at    INTEGER,                 -- NULL: no token was produced
    finished_at       INTEGER NOT NULL,
    cost_pico         INTEGER NOT NULL CHECK (cost_pico >= 0)
) STRICT;
CREATE INDEX usage_records_time ON usage_records (received_at);
CREATE INDEX usage_records_tenant_time ON usage_records (tenant_id, received_at);

CREATE TRIGGER usage_records_no_update BEFORE UPDATE ON usage_records
BEGIN SELECT RAISE (ABORT, 'usage_records is append-only'); END;
CREATE TRIGGER usage_records_no_delete BEFORE DELETE ON usage_records
BEGIN SELECT RAISE (ABORT, 'usage_records is append-only'); END;
