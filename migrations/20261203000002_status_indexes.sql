-- The ready-next order (`status`'s "ready" list: high priority first, then
-- list order) as an index, so that listing the first few ready tasks of a
-- 100k-task plan walks the index and stops, instead of sorting every
-- pending task. The expression must stay the one in store/read.rs
-- (Order::PriorityFirst) for SQLite to use it.
CREATE INDEX tasks_ready_order ON tasks (
    plan_id,
    status,
    (CASE priority WHEN 'high' THEN 0 WHEN 'medium' THEN 1 ELSE 2 END),
    position,
    id
) WHERE archived_at IS NULL;

-- The tasks that wait on others, few in most plans: counting the ready and
-- the blocked visits these, not every pending task.
CREATE INDEX tasks_waiting ON tasks (plan_id, status)
    WHERE dependency_count > 0 AND archived_at IS NULL;
