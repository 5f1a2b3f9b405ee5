-- Retention: the purge job finds dead letters, quarantined and discarded receipts,
-- and conflicting duplicates, by age without reading the whole table. Each index's
-- condition is the purge's own, word for word, so the planner can use it.
CREATE INDEX receipts_dead ON receipts (received_at_ms) WHERE state IN ('dead', 'quarantined');
CREATE INDEX receipts_discarded ON receipts ((COALESCE(discarded_at_ms, received_at_ms))) WHERE state = 'discarded';
CREATE INDEX conflicts_received ON conflicts (received_at_ms);
