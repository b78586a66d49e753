-- /metrics counts each phase task's drift events at every scrape; the
-- events of a days-long generation are mostly progress, so the count walks
-- an index of the few drift events rather than the task's whole history.
CREATE INDEX events_drift_by_task ON events (task_id) WHERE type = 'drift';
