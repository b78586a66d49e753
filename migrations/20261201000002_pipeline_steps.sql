-- A task made by a pipeline file names its step ("adaptation",
-- "feasibility", "generation", "tokenization"), so that applying the file
-- again finds the same task instead of making another. NULL for every other
-- task.
ALTER TABLE tasks ADD COLUMN pipeline_step TEXT;
CREATE UNIQUE INDEX tasks_pipeline_step ON tasks (plan_id, pipeline_step)
    WHERE pipeline_step IS NOT NULL;
