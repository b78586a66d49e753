-- The todo graph: plans, tasks, dependency edges and the append-only history.
-- Times are Unix milliseconds (UTC). Task ids are AUTOINCREMENT so that an id is
-- never reused, even after the newest task is gone.

CREATE TABLE plans (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT    NOT NULL UNIQUE,
    title       TEXT    NOT NULL DEFAULT '',
    revision    INTEGER NOT NULL DEFAULT 0 CHECK (revision >= 0),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

CREATE TABLE tasks (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    plan_id      INTEGER NOT NULL REFERENCES plans(id),
    content      TEXT    NOT NULL CHECK (length(content) > 0),
    status       TEXT    NOT NULL CHECK (status IN ('pending', 'in_progress', 'completed', 'cancelled', 'failed')),
    priority     TEXT    NOT NULL CHECK (priority IN ('high', 'medium', 'low')),
    kind         TEXT    NOT NULL CHECK (kind IN ('todo', 'feasibility', 'prompt_adaptation', 'generation', 'tokenization')),
    position     INTEGER NOT NULL,
    spec         TEXT,
    progress     TEXT,
    result       TEXT,
    error        TEXT,
    revision     INTEGER NOT NULL DEFAULT 1,
    -- Kept by the triggers below; lets listings skip the dependency lookup for
    -- the many tasks that have none.
    dependency_count INTEGER NOT NULL DEFAULT 0,
    archived_at  INTEGER,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    started_at   INTEGER,
    finished_at  INTEGER
);

-- Lists walk live tasks of a plan in list order.
CREATE INDEX tasks_by_plan_position ON tasks (plan_id, archived_at, position, id);
CREATE INDEX tasks_by_plan_status ON tasks (plan_id, status) WHERE archived_at IS NULL;

CREATE TABLE dependencies (
    task_id     INTEGER NOT NULL REFERENCES tasks(id),
    depends_on  INTEGER NOT NULL REFERENCES tasks(id),
    PRIMARY KEY (task_id, depends_on),
    CHECK (task_id <> depends_on)
) WITHOUT ROWID;

CREATE INDEX dependencies_by_target ON dependencies (depends_on, task_id);

CREATE TRIGGER dependency_count_up AFTER INSERT ON dependencies
BEGIN
    UPDATE tasks SET dependency_count = dependency_count + 1 WHERE id = NEW.task_id;
END;

CREATE TRIGGER dependency_count_down AFTER DELETE ON dependencies
BEGIN
    UPDATE tasks SET dependency_count = dependency_count - 1 WHERE id = OLD.task_id;
END;

CREATE TABLE events (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    plan_id        INTEGER NOT NULL REFERENCES plans(id),
    task_id        INTEGER REFERENCES tasks(id),
    type           TEXT    NOT NULL,
    from_status    TEXT,
    to_status      TEXT,
    old_value      TEXT,
    new_value      TEXT,
    actor          TEXT    NOT NULL,
    reason         TEXT    NOT NULL DEFAULT '',
    at             INTEGER NOT NULL,
    plan_revision  INTEGER NOT NULL
);

CREATE INDEX events_by_plan ON events (plan_id, seq);
CREATE INDEX events_by_task ON events (task_id, seq) WHERE task_id IS NOT NULL;

-- The history is append-only: nothing may rewrite or drop it.
CREATE TRIGGER events_are_append_only_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

CREATE TRIGGER events_are_append_only_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
