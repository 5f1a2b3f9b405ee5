-- When an event was discarded (by an operator, or with its deleted endpoint): a
-- discarded receipt's retention (dead_days) counts from then. Receipts discarded
-- before this column existed count from their arrival.
ALTER TABLE receipts ADD COLUMN discarded_at_ms BIGINT;
