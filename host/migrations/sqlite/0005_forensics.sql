-- Verification forensics: requests that were refused after their body was read.
-- `failed`: verified, then a 5xx (a plugin trap in describe-event, say); kept in full
-- until re-ingested, so no authentic payload is lost. `rejected`: refused before it was
-- verified (a 4xx, or a plugin failure while planning); kept bounded per endpoint.
CREATE TABLE forensics (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    endpoint          TEXT    NOT NULL,
    kind              TEXT    NOT NULL CHECK (kind IN ('failed', 'rejected')),
    received_at_ms    INTEGER NOT NULL,
    status            INTEGER NOT NULL,
    code              TEXT    NOT NULL, -- the stable error code the sender was answered
    detail            TEXT    NOT NULL, -- JSON: what verification found, see forensics.rs
    method            TEXT    NOT NULL,
    url               TEXT    NOT NULL,
    headers           TEXT    NOT NULL, -- JSON [[name, value], ...], credentials redacted
    signature_headers TEXT,             -- JSON [name, ...] carrying signatures; NULL: unknown
    body              BLOB,             -- NULL when only the digest is kept
    body_sha256       BLOB    NOT NULL,
    body_len          INTEGER NOT NULL,
    event_id          TEXT,             -- when verification got that far
    reingested_at_ms  INTEGER,
    reingest_outcome  TEXT
) STRICT;
CREATE INDEX forensics_by_endpoint ON forensics (endpoint, kind, id);
CREATE INDEX forensics_by_age ON forensics (received_at_ms);
