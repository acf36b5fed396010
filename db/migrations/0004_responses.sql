-- 0004_responses.sql — responses kept for /v1/responses (store: true):
-- GET /v1/responses/{id}, DELETE /v1/responses/{id} and previous_response_id.
--
-- A response belongs to one tenant; every lookup names the tenant, so another
-- tenant's ids are unknown. Unlike tenants, keys and adapters these rows are
-- the tenant's own data and are really deleted: by DELETE, and once past
-- expires_at (--responses-retention; the writer removes expired rows as it
-- stores new ones, and lookups ignore them before that). No foreign key to
-- tenants (tenants are never deleted; a deleted tenant's keys stop working,
-- so its rows are unreachable and expire).
-- Times are Unix milliseconds (UTC).

CREATE TABLE responses (
    id           TEXT    PRIMARY KEY NOT NULL CHECK (length(id) BETWEEN 1 AND 127),
    tenant_id    INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    response     TEXT    NOT NULL,   -- the response object (JSON) as GET returns it
    conversation TEXT    NOT NULL    -- the chat messages through its output (JSON), for previous_response_id
) STRICT;
CREATE INDEX responses_tenant ON responses (tenant_id, id);
CREATE INDEX responses_expiry ON responses (expires_at);
