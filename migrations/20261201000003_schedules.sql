-- A task's schedule: a cron expression in a time zone, and what a firing
-- does. `next_fire_at` (Unix ms) is the next slot; a daemon that was down
-- past it fires once at start-up and moves it past now.
CREATE TABLE schedules (
    task_id       INTEGER PRIMARY KEY REFERENCES tasks (id),
    cron          TEXT    NOT NULL,
    timezone      TEXT    NOT NULL,
    action        TEXT    NOT NULL,
    next_fire_at  INTEGER,
    last_fired_at INTEGER,
    created_at    INTEGER NOT NULL
);
CREATE INDEX schedules_next ON schedules (next_fire_at);
