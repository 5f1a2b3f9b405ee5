-- Receipts: one row per (endpoint, provider event id), the durable evidence of what
-- arrived. `state` is the inbox: `pending` rows await delivery.
CREATE TABLE receipts (
    endpoint          TEXT    NOT NULL,
    event_id          TEXT    NOT NULL,
    body_sha256       BLOB    NOT NULL,
    body              BLOB    NOT NULL,
    headers           TEXT    NOT NULL, -- JSON [[name, value], ...], credentials removed
    secret_index      INTEGER NOT NULL, -- which active secret matched (0 = current)
    plugin            TEXT    NOT NULL,
    plugin_version    TEXT    NOT NULL,
    plugin_digest     TEXT    NOT NULL,
    message_id        TEXT,
    event_type        TEXT    NOT NULL,
    resource_kind     TEXT,
    resource_id       TEXT,
    resource_version  INTEGER,
    deleted           INTEGER NOT NULL DEFAULT 0,
    occurred_at       INTEGER,          -- unix seconds, as the provider says
    signed_at         INTEGER,          -- unix seconds, the signed timestamp
    received_at_ms    INTEGER NOT NULL,
    state             TEXT    NOT NULL CHECK (state IN ('pending', 'ignored', 'stale')),
    state_reason      TEXT,
    PRIMARY KEY (endpoint, event_id)
) STRICT;

CREATE INDEX receipts_pending ON receipts (state, received_at_ms) WHERE state = 'pending';

-- A second delivery under a known event id with a different body: kept beside the
-- first evidence, never overwriting it.
CREATE TABLE conflicts (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint        TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    body_sha256     BLOB    NOT NULL,
    body            BLOB    NOT NULL,
    headers         TEXT    NOT NULL,
    secret_index    INTEGER NOT NULL,
    received_at_ms  INTEGER NOT NULL
) STRICT;

CREATE INDEX conflicts_event ON conflicts (endpoint, event_id);

-- The version gate: highest accepted version per resource, and a tombstone for deletes.
CREATE TABLE resource_versions (
    endpoint       TEXT    NOT NULL,
    resource_kind  TEXT    NOT NULL,
    resource_id    TEXT    NOT NULL,
    version        INTEGER NOT NULL,
    event_id       TEXT    NOT NULL,
    deleted        INTEGER NOT NULL,
    PRIMARY KEY (endpoint, resource_kind, resource_id)
) STRICT;
