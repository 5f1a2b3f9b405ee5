-- How a receipt came: pushed by the provider, or repaired by reconciliation (pulled
-- from the provider's API because no push ever arrived).
ALTER TABLE receipts ADD COLUMN source TEXT NOT NULL DEFAULT 'push';

-- One reconciliation run over one endpoint: what it read, found and repaired. The
-- cursor is written after every page, so a run cut short resumes where it stopped.
CREATE TABLE reconcile_runs (
    id             TEXT    PRIMARY KEY,
    endpoint       TEXT    NOT NULL,
    -- Events created at or after this (unix seconds) were asked for.
    since          BIGINT  NOT NULL,
    dry_run        BOOLEAN NOT NULL,
    -- running, done or failed.
    state          TEXT    NOT NULL,
    cursor         TEXT,
    pages          BIGINT  NOT NULL DEFAULT 0,
    seen           BIGINT  NOT NULL DEFAULT 0,
    present        BIGINT  NOT NULL DEFAULT 0,
    repaired       BIGINT  NOT NULL DEFAULT 0,
    errors         BIGINT  NOT NULL DEFAULT 0,
    last_error     TEXT,
    started_at_ms  BIGINT  NOT NULL,
    ended_at_ms    BIGINT
);
CREATE INDEX reconcile_runs_by_endpoint ON reconcile_runs (endpoint, started_at_ms);

-- The events a run repaired (or, dry, would have).
CREATE TABLE reconcile_repairs (
    run            TEXT    NOT NULL REFERENCES reconcile_runs (id),
    event_id       TEXT    NOT NULL,
    event_type     TEXT    NOT NULL,
    -- repaired, or the receipt store's answer when it was not (duplicate, ignored…).
    result         TEXT    NOT NULL,
    at_ms          BIGINT  NOT NULL,
    PRIMARY KEY (run, event_id)
);
