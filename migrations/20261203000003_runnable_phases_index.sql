-- The phase runtime asks for the runnable phase tasks after every commit
-- (store/phases.rs, runnable_phase_tasks). Without an index that is a scan of
-- every task: on a daemon holding a 100k-task plan, a scan for each write and
-- for each checkpoint of a running generation. Phase tasks are few, so the
-- runtime's look visits these only. The terms must stay those of the query's
-- WHERE for SQLite to use the index.
CREATE INDEX tasks_runnable_phases ON tasks (id)
    WHERE kind <> 'todo' AND archived_at IS NULL AND status IN ('in_progress', 'pending');
