-- The receipt's state checked by comparisons, not by an IN list: for an IN list of
-- more than two constants SQLite builds a temporary B-tree each time the check runs,
-- that is on every receipt stored and every change of state (docs/performance.md,
-- section 19). Same states, same rows. SQLite cannot change a CHECK in place, so the
-- table is rebuilt.
CREATE TABLE receipts_v3 (
    endpoint            TEXT    NOT NULL,
    event_id            TEXT    NOT NULL,
    body_sha256         BLOB    NOT NULL,
    body                BLOB    NOT NULL,
    headers             TEXT    NOT NULL, -- JSON [[name, value], ...], credentials removed
    secret_index        INTEGER NOT NULL, -- which active secret matched (0 = current)
    plugin              TEXT    NOT NULL,
    plugin_version      TEXT    NOT NULL,
    plugin_digest       TEXT    NOT NULL,
    message_id          TEXT,
    event_type          TEXT    NOT NULL,
    resource_kind       TEXT,
    resource_id         TEXT,
    resource_version    INTEGER,
    deleted             INTEGER NOT NULL DEFAULT 0,
    occurred_at         INTEGER,          -- unix seconds, as the provider says
    signed_at           INTEGER,          -- unix seconds, the signed timestamp
    received_at_ms      INTEGER NOT NULL,
    state               TEXT    NOT NULL CHECK (
                            state = 'pending' OR state = 'ignored' OR state = 'stale'
                            OR state = 'delivered' OR state = 'dead'
                            OR state = 'quarantined' OR state = 'discarded'),
    state_reason        TEXT,
    attempts            INTEGER NOT NULL DEFAULT 0,
    next_attempt_at_ms  INTEGER NOT NULL DEFAULT 0,  -- due when <= now (0: at once)
    lease_owner         TEXT,
    lease_expires_at_ms INTEGER,
    last_error          TEXT,
    delivered_at_ms     INTEGER,
    source              TEXT    NOT NULL DEFAULT 'push', -- 'push' or 'reconcile'
    PRIMARY KEY (endpoint, event_id)
) STRICT;

INSERT INTO receipts_v3 (endpoint, event_id, body_sha256, body, headers, secret_index,
    plugin, plugin_version, plugin_digest, message_id, event_type, resource_kind,
    resource_id, resource_version, deleted, occurred_at, signed_at, received_at_ms,
    state, state_reason, attempts, next_attempt_at_ms, lease_owner, lease_expires_at_ms,
    last_error, delivered_at_ms, source)
SELECT endpoint, event_id, body_sha256, body, headers, secret_index,
    plugin, plugin_version, plugin_digest, message_id, event_type, resource_kind,
    resource_id, resource_version, deleted, occurred_at, signed_at, received_at_ms,
    state, state_reason, attempts, next_attempt_at_ms, lease_owner, lease_expires_at_ms,
    last_error, delivered_at_ms, source
FROM receipts;

DROP TABLE receipts;
ALTER TABLE receipts_v3 RENAME TO receipts;

CREATE INDEX receipts_due ON receipts (next_attempt_at_ms, received_at_ms) WHERE state = 'pending';
CREATE INDEX receipts_resource ON receipts (endpoint, resource_kind, resource_id, state)
    WHERE resource_id IS NOT NULL;
CREATE INDEX receipts_delivered ON receipts (delivered_at_ms) WHERE state = 'delivered';
