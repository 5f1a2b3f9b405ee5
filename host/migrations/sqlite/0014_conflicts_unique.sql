-- A conflicting body is kept once per event id, by a unique index as on PostgreSQL
-- (where two processes could each keep it). The one writer already kept it once.
DELETE FROM conflicts WHERE id NOT IN (
    SELECT MIN(id) FROM conflicts GROUP BY endpoint, event_id, body_sha256);
CREATE UNIQUE INDEX conflicts_body ON conflicts (endpoint, event_id, body_sha256);
-- The unique index serves what this one did (its first two columns).
DROP INDEX conflicts_event;
