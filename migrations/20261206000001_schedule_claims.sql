-- Which daemon fires a schedule's due slot, when several share a database
-- (PostgreSQL): the first to claim it, until the claim expires (the
-- claimant died mid-firing) on the database's clock. A slot is recorded
-- once whatever happens (the firing checks that the slot is still due);
-- the claim keeps the work of a firing (probes, a re-measurement that holds
-- the run) from being done by every daemon at once. Unused on SQLite (one
-- daemon per database), kept so both schemas are the same.
CREATE TABLE schedule_claims (
    task_id     INTEGER PRIMARY KEY REFERENCES tasks(id),
    due_at      INTEGER NOT NULL,
    holder      TEXT NOT NULL,
    expires_at  INTEGER NOT NULL
);
