-- A conflicting body is kept once per event id. Two processes storing the same resend
-- at once could each keep it: each batch's check for it ran before the other's
-- commit. With the unique index, the second insert waits for the first and is skipped.
DELETE FROM conflicts AS later USING conflicts AS first
 WHERE later.endpoint = first.endpoint AND later.event_id = first.event_id
   AND later.body_sha256 = first.body_sha256 AND later.id > first.id;
CREATE UNIQUE INDEX conflicts_body ON conflicts (endpoint, event_id, body_sha256);
-- The unique index serves what this one did (its first two columns).
DROP INDEX conflicts_event;
