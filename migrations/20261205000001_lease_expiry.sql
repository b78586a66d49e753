-- When the lease of the attempt that holds an in-progress phase task
-- (tasks.lease_owner) ends unless renewed: milliseconds since the epoch, on
-- the database's clock where several daemons share it. No row: held with no
-- expiry, as by the one daemon of a database.
--
-- A table of its own, not a column of tasks: a fresh database runs every
-- migration on one connection, and after the kinds migration edited the
-- tasks table's text that connection cannot ADD COLUMN to it.
CREATE TABLE phase_leases (
    task_id     INTEGER PRIMARY KEY REFERENCES tasks(id),
    expires_at  INTEGER NOT NULL
);
