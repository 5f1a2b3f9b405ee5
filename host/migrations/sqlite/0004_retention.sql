-- Retention: the purge job finds delivered receipts by age without a full scan.
CREATE INDEX receipts_delivered ON receipts (delivered_at_ms) WHERE state = 'delivered';
