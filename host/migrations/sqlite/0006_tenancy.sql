-- Tenants and what they manage at runtime through the `/v1` API.
CREATE TABLE tenants (
    id             TEXT    PRIMARY KEY,
    name           TEXT    NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    -- Quotas; NULL: the configuration's defaults.
    requests_per_second  INTEGER,
    max_endpoints        INTEGER,
    -- Its endpoints' raw bodies are sealed at rest with the master key.
    seal_bodies          INTEGER NOT NULL DEFAULT 0
) STRICT;

-- API tokens: only their SHA-256 is kept; a token is shown once, when issued.
CREATE TABLE tenant_tokens (
    id             TEXT    PRIMARY KEY,
    tenant         TEXT    NOT NULL REFERENCES tenants (id),
    token_sha256   BLOB    NOT NULL UNIQUE,
    created_at_ms  INTEGER NOT NULL,
    revoked_at_ms  INTEGER
) STRICT;

-- Endpoints created through the API; `spec` is their settings as JSON (no secret).
CREATE TABLE managed_endpoints (
    id             TEXT    PRIMARY KEY, -- `{tenant}.{name}`: /webhooks/{id}
    tenant         TEXT    NOT NULL REFERENCES tenants (id),
    spec           TEXT    NOT NULL,
    -- The destination's signing secret, sealed like endpoint_secrets (secret id
    -- `destination`); NULL without a destination.
    destination_sealed  BLOB,
    created_at_ms  INTEGER NOT NULL,
    updated_at_ms  INTEGER NOT NULL
) STRICT;

-- Endpoint secrets, sealed with the master key (nonce || ciphertext, the endpoint and
-- secret ids as associated data). The newest active one is current.
CREATE TABLE endpoint_secrets (
    id             TEXT    PRIMARY KEY,
    endpoint       TEXT    NOT NULL,
    sealed         BLOB    NOT NULL,
    fingerprint    TEXT    NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    retired_at_ms  INTEGER,
    -- When a request last verified with it (written every half second or so).
    last_matched_at_ms  INTEGER
) STRICT;
CREATE INDEX endpoint_secrets_by_endpoint ON endpoint_secrets (endpoint);

-- Plugins tenants uploaded: content-addressed and never deleted (a receipt names
-- the digest that produced it; replay may need it again).
CREATE TABLE tenant_plugins (
    tenant         TEXT    NOT NULL REFERENCES tenants (id),
    digest         TEXT    NOT NULL, -- hex SHA-256 of the component
    name           TEXT    NOT NULL,
    version        TEXT    NOT NULL,
    size           INTEGER NOT NULL,
    wasm           BLOB    NOT NULL,
    created_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant, digest)
) STRICT;

-- Bumped by every change above; each process polls it and reloads when it moves.
CREATE TABLE registry_version (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    version  INTEGER NOT NULL
) STRICT;
INSERT INTO registry_version (id, version) VALUES (1, 0);
