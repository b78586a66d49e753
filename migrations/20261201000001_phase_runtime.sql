-- The phase runtime: fenced attempts, one checkpoint document per task, output
-- paths claimed by one task at a time, and the duplicate lines an input survey
-- found.

-- Set when a client pauses a running phase task (in_progress -> pending):
-- auto-start then waits for an explicit start instead of restarting it.
ALTER TABLE tasks ADD COLUMN held INTEGER NOT NULL DEFAULT 0;

-- tasks.lease_owner now holds the attempt token of the run that holds the task
-- (the daemon run id plus a per-run number); a checkpoint or an end from any
-- other attempt is refused.

-- The committed state of a phase task: a JSON document the phase runtime
-- defines (input identity, cursor, output files with their identities and
-- committed lengths, counters), rewritten in the transaction of each batch.
CREATE TABLE phase_state (
    task_id     INTEGER PRIMARY KEY REFERENCES tasks(id),
    state       TEXT    NOT NULL,
    updated_at  INTEGER NOT NULL
);

-- Every output path a phase task writes, claimed at creation. A path is held
-- by one task at a time: a cancelled task lets go of its claims and takes them
-- back when restored, if nobody took them meanwhile.
CREATE TABLE phase_outputs (
    task_id  INTEGER NOT NULL REFERENCES tasks(id),
    path     TEXT    NOT NULL,
    field    TEXT    NOT NULL,
    active   INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (task_id, path)
) WITHOUT ROWID;

CREATE UNIQUE INDEX phase_outputs_claimed ON phase_outputs (path) WHERE active = 1;

-- Lines of a pass's input whose record id repeats an earlier line's: rejected
-- as duplicates. Found once, before the pass starts, so that resuming needs
-- no set of every id seen.
CREATE TABLE phase_duplicates (
    task_id  INTEGER NOT NULL REFERENCES tasks(id),
    pass     INTEGER NOT NULL,
    line     INTEGER NOT NULL,
    PRIMARY KEY (task_id, pass, line)
) WITHOUT ROWID;
