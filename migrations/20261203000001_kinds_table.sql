-- The kinds a task may be, as a table: the daemon writes its own table of
-- phase kinds into it at every start (Store::register_kinds), so that a new
-- phase kind needs no change to `tasks`. It replaces the CHECK that listed
-- the first five kinds: removing a CHECK constraint is one of the schema
-- changes SQLite documents as safe through writable_schema (the rows are
-- untouched, and every one of them satisfies the triggers below, which are
-- the check from now on). The schema version moves on so that every
-- connection reads the new schema.
CREATE TABLE kinds (
    name TEXT PRIMARY KEY
) WITHOUT ROWID;

INSERT INTO kinds (name) VALUES
    ('todo'), ('feasibility'), ('prompt_adaptation'), ('generation'), ('tokenization');

PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql,
    'CHECK (kind IN (''todo'', ''feasibility'', ''prompt_adaptation'', ''generation'', ''tokenization''))',
    '')
WHERE type = 'table' AND name = 'tasks';
PRAGMA writable_schema = OFF;

CREATE TRIGGER tasks_kind_known BEFORE INSERT ON tasks
WHEN NOT EXISTS (SELECT 1 FROM kinds WHERE name = NEW.kind)
BEGIN
    SELECT RAISE(ABORT, 'unknown task kind');
END;

CREATE TRIGGER tasks_kind_stays BEFORE UPDATE OF kind ON tasks
WHEN NOT EXISTS (SELECT 1 FROM kinds WHERE name = NEW.kind)
BEGIN
    SELECT RAISE(ABORT, 'unknown task kind');
END;
