-- Verification forensics, as SQLite's migration 0005: requests refused after their
-- body was read. `failed`: verified, then a 5xx; kept in full until re-ingested.
-- `rejected`: refused before it was verified; kept bounded per endpoint.
CREATE TABLE forensics (
    id                BIGINT  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint          TEXT    NOT NULL,
    kind              TEXT    NOT NULL CHECK (kind IN ('failed', 'rejected')),
    received_at_ms    BIGINT  NOT NULL,
    status            BIGINT  NOT NULL,
    code              TEXT    NOT NULL,
    detail            TEXT    NOT NULL,
    method            TEXT    NOT NULL,
    url               TEXT    NOT NULL,
    headers           TEXT    NOT NULL,
    signature_headers TEXT,
    body              BYTEA,
    body_sha256       BYTEA   NOT NULL,
    body_len          BIGINT  NOT NULL,
    event_id          TEXT,
    reingested_at_ms  BIGINT,
    reingest_outcome  TEXT
);
CREATE INDEX forensics_by_endpoint ON forensics (endpoint, kind, id);
CREATE INDEX forensics_by_age ON forensics (received_at_ms);
