-- The PostgreSQL schema: the same tables, states and constraints as the SQLite store's
-- migrations 0001-0004, in one step. Bytes are BYTEA, times BIGINT milliseconds (or
-- seconds where the provider says seconds), counters BIGINT.

-- Receipts: one row per (endpoint, provider event id), the durable evidence of what
-- arrived. `state` is the inbox: `pending` rows await delivery. The primary key is what
-- makes a receipt exactly-once across every process sharing the database.
CREATE TABLE receipts (
    endpoint            TEXT    NOT NULL,
    event_id            TEXT    NOT NULL,
    body_sha256         BYTEA   NOT NULL,
    body                BYTEA   NOT NULL,
    headers             TEXT    NOT NULL, -- JSON [[name, value], ...], credentials removed
    secret_index        BIGINT  NOT NULL, -- which active secret matched (0 = current)
    plugin              TEXT    NOT NULL,
    plugin_version      TEXT    NOT NULL,
    plugin_digest       TEXT    NOT NULL,
    message_id          TEXT,
    event_type          TEXT    NOT NULL,
    resource_kind       TEXT,
    resource_id         TEXT,
    resource_version    BIGINT,
    deleted             BOOLEAN NOT NULL DEFAULT FALSE,
    occurred_at         BIGINT,           -- unix seconds, as the provider says
    signed_at           BIGINT,           -- unix seconds, the signed timestamp
    received_at_ms      BIGINT  NOT NULL,
    state               TEXT    NOT NULL CHECK (state IN
                            ('pending', 'ignored', 'stale', 'delivered', 'dead', 'quarantined',
                             'discarded')),
    state_reason        TEXT,
    attempts            BIGINT  NOT NULL DEFAULT 0,
    next_attempt_at_ms  BIGINT  NOT NULL DEFAULT 0,  -- due when <= now (0: at once)
    lease_owner         TEXT,
    lease_expires_at_ms BIGINT,
    last_error          TEXT,
    delivered_at_ms     BIGINT,
    PRIMARY KEY (endpoint, event_id)
);

-- Due pending rows only: the lease query's cost follows the backlog, not the history.
CREATE INDEX receipts_due ON receipts (next_attempt_at_ms, received_at_ms) WHERE state = 'pending';

-- Per-resource ordering: the lease query looks for other pending events of the same
-- resource before leasing one.
CREATE INDEX receipts_resource ON receipts (endpoint, resource_kind, resource_id, state)
    WHERE resource_id IS NOT NULL;

-- Retention: delivered receipts by age.
CREATE INDEX receipts_delivered ON receipts (delivered_at_ms) WHERE state = 'delivered';

-- A second delivery under a known event id with a different body: kept beside the
-- first evidence, never overwriting it.
CREATE TABLE conflicts (
    id              BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint        TEXT    NOT NULL,
    event_id        TEXT    NOT NULL,
    body_sha256     BYTEA   NOT NULL,
    body            BYTEA   NOT NULL,
    headers         TEXT    NOT NULL,
    secret_index    BIGINT  NOT NULL,
    received_at_ms  BIGINT  NOT NULL
);

CREATE INDEX conflicts_event ON conflicts (endpoint, event_id);

-- The version gate: highest accepted version per resource, and a tombstone for deletes.
CREATE TABLE resource_versions (
    endpoint       TEXT    NOT NULL,
    resource_kind  TEXT    NOT NULL,
    resource_id    TEXT    NOT NULL,
    version        BIGINT  NOT NULL,
    event_id       TEXT    NOT NULL,
    deleted        BOOLEAN NOT NULL,
    PRIMARY KEY (endpoint, resource_kind, resource_id)
);

-- One row per delivery attempt, never deleted by the worker.
CREATE TABLE attempts (
    id             BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint       TEXT    NOT NULL,
    event_id       TEXT    NOT NULL,
    attempt        BIGINT  NOT NULL,
    started_at_ms  BIGINT  NOT NULL,
    ended_at_ms    BIGINT  NOT NULL,
    status         BIGINT,           -- HTTP status, when one came back
    error          TEXT              -- capped
);

CREATE INDEX attempts_event ON attempts (endpoint, event_id);

-- Endpoints whose delivery an operator paused: events are still accepted and wait.
CREATE TABLE endpoint_pauses (
    endpoint      TEXT    PRIMARY KEY,
    paused_at_ms  BIGINT  NOT NULL
);
