-- Who paused an endpoint's delivery: `operator` (the admin API or the CLI) or
-- `tenant` (the tenant API). A tenant resumes only its own pause; an operator's
-- pause holds until an operator resumes it. Pauses made before this column existed
-- cannot be told apart and count as the operator's.
ALTER TABLE endpoint_pauses ADD COLUMN paused_by TEXT NOT NULL DEFAULT 'operator'
    CHECK (paused_by IN ('operator', 'tenant'));
