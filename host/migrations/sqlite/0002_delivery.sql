-- Delivery: receipts gain the states and bookkeeping of the worker pool, and every
-- attempt is recorded. SQLite cannot widen a CHECK constraint in place, so the table
-- is rebuilt with the same rows.
CREATE TABLE receipts_v2 (
    endpoint            TEXT    NOT NULL,
    event_id            TEXT    NOT NULL,
    body_sha256         BLOB    NOT NULL,
    body                BLOB    NOT NULL,
    headers             TEXT    NOT NULL,
    secret_index        INTEGER NOT NULL,
    plugin              TEXT    NOT NULL,
    plugin_version      TEXT    NOT NULL,
    plugin_digest       TEXT    NOT NULL,
    message_id          TEXT,
    event_type          TEXT    NOT NULL,
    resource_kind       TEXT,
    resource_id         TEXT,
    resource_version    INTEGER,
    deleted             INTEGER NOT NULL DEFAULT 0,
    occurred_at         INTEGER,
    signed_at           INTEGER,
    received_at_ms      INTEGER NOT NULL,
    state               TEXT    NOT NULL CHECK (state IN
                            ('pending', 'ignored', 'stale', 'delivered', 'dead', 'quarantined',
                             'discarded')),
    state_reason        TEXT,
    attempts            INTEGER NOT NULL DEFAULT 0,
    next_attempt_at_ms  INTEGER NOT NULL DEFAULT 0,  -- due when <= now (0: at once)
    lease_owner         TEXT,
    lease_expires_at_ms INTEGER,
    last_error          TEXT,
    delivered_at_ms     INTEGER,
    PRIMARY KEY (endpoint, event_id)
) STRICT;

INSERT INTO receipts_v2 (endpoint, event_id, body_sha256, body, headers, secret_index,
    plugin, plugin_version, plugin_digest, message_id, event_type, resource_kind,
    resource_id, resource_version, deleted, occurred_at, signed_at, received_at_ms,
    state, state_reason)
SELECT endpoint, event_id, body_sha256, body, headers, secret_index,
    plugin, plugin_version, plugin_digest, message_id, event_type, resource_kind,
    resource_id, resource_version, deleted, occurred_at, signed_at, received_at_ms,
    state, state_reason
FROM receipts;

DROP TABLE receipts;
ALTER TABLE receipts_v2 RENAME TO receipts;

CREATE INDEX receipts_due ON receipts (next_attempt_at_ms, received_at_ms) WHERE state = 'pending';

-- One row per delivery attempt, never deleted by the worker.
CREATE TABLE attempts (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint       TEXT    NOT NULL,
    event_id       TEXT    NOT NULL,
    attempt        INTEGER NOT NULL,
    started_at_ms  INTEGER NOT NULL,
    ended_at_ms    INTEGER NOT NULL,
    status         INTEGER,          -- HTTP status, when one came back
    error          TEXT              -- capped
) STRICT;

CREATE INDEX attempts_event ON attempts (endpoint, event_id);
