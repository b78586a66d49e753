-- Sharded phase tasks (issue 24): one task's records split over shards that
-- different daemons run at once. A row per shard, made when a run first
-- takes it: who holds it and until when (on the database's clock, as
-- phase_leases), its checkpoint (the same document phase_state keeps for a
-- whole task), its last progress and its result once it is done. The
-- task's own progress is the sum of its shards', written with each shard's.
CREATE TABLE phase_shards (
    task_id     INTEGER NOT NULL REFERENCES tasks(id),
    shard       INTEGER NOT NULL,
    shards      INTEGER NOT NULL,
    lease_owner TEXT,
    expires_at  INTEGER,
    state       TEXT,
    progress    TEXT,
    result      TEXT,
    done        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, shard)
);

-- The daemon runs alive on this database, each renewed with its leases: a
-- daemon takes its fair share of a sharded task's shards (the shards over
-- the daemons alive), so that three daemons run three shards, not one
-- daemon all of them.
CREATE TABLE daemon_runs (
    run_id      TEXT PRIMARY KEY,
    seen_until  INTEGER NOT NULL
);
