-- Retention: the purge job finds ignored and stale receipts (settled as they arrived)
-- by age without a full scan.
CREATE INDEX receipts_settled ON receipts (received_at_ms) WHERE state IN ('ignored', 'stale');
