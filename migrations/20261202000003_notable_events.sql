-- The status page reads a task's notable history (schedule firings, drift,
-- calibration, restarts) without walking the progress events, which are
-- one a second for the length of a run.
CREATE INDEX events_notable_by_task ON events (task_id, seq) WHERE type <> 'progress';
