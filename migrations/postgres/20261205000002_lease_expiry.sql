-- When the lease of the attempt that holds an in-progress phase task
-- (tasks.lease_owner) ends unless renewed: milliseconds since the epoch on
-- this server's clock, which every daemon sharing the database judges leases
-- by (never its own). The same table as SQLite's.
CREATE TABLE phase_leases (
    task_id     BIGINT PRIMARY KEY REFERENCES tasks(id),
    expires_at  BIGINT NOT NULL
);
