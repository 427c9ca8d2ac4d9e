-- API keys of the HTTP API (store/apikeys.go). A key is shown once, as
-- efk_<id>_<secret>: id is its public lookup prefix, and only the SHA-256 of
-- the 256-bit random secret is kept. Each key belongs to one tenant and
-- carries scopes (space-separated). revoked_at is NULL while the key is valid.
-- id and tenant_id sort by code point, as in SQLite.

CREATE TABLE api_keys (
    id          TEXT COLLATE "C" PRIMARY KEY,
    tenant_id   TEXT COLLATE "C" NOT NULL,
    scopes      TEXT NOT NULL,
    secret_hash BYTEA NOT NULL,
    name        TEXT NOT NULL DEFAULT '',
    created_at  TIMESTAMPTZ NOT NULL,
    revoked_at  TIMESTAMPTZ
);

CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);
