-- Per-resource ordering: the worker looks for other pending events of the same
-- resource before leasing one.
CREATE INDEX receipts_resource ON receipts (endpoint, resource_kind, resource_id, state)
    WHERE resource_id IS NOT NULL;

-- Endpoints whose delivery an operator paused: events are still accepted and wait.
CREATE TABLE endpoint_pauses (
    endpoint      TEXT    PRIMARY KEY,
    paused_at_ms  INTEGER NOT NULL
) STRICT;
