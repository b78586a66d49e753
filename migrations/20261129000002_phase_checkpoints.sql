-- Durable progress of phase workers: where each output file was last committed,
-- and which input records have been written, so that a worker resumed after a
-- crash truncates what was appended but not committed and skips what was.

-- The daemon run that holds a phase task while it runs. A run that finds
-- in_progress phase tasks held by an earlier run resumes them.
ALTER TABLE tasks ADD COLUMN lease_owner TEXT;

CREATE TABLE phase_checkpoints (
    task_id     INTEGER PRIMARY KEY REFERENCES tasks(id),
    -- JSON array: the committed length in bytes of each output file, in the
    -- order the phase declares its files.
    offsets     TEXT    NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE TABLE phase_records (
    task_id    INTEGER NOT NULL REFERENCES tasks(id),
    record_id  TEXT    NOT NULL,
    PRIMARY KEY (task_id, record_id)
) WITHOUT ROWID;
