-- Per-resource ordering: the worker looks for other pending events of the same
-- resource before leasing one.
CREATE INDEX receipts_resource ON receipts (endpoint, resource_kind, resource_id, state)
    WHERE resource_id IS NOT NULL;
