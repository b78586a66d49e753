-- Which daemon fires a schedule's due slot when several share the database:
-- the first to claim it, until the claim expires on the database's clock.
-- See the SQLite migration of the same name.
CREATE TABLE schedule_claims (
    task_id     BIGINT PRIMARY KEY REFERENCES tasks(id),
    due_at      BIGINT NOT NULL,
    holder      TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
