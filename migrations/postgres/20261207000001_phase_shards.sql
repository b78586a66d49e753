-- Sharded phase tasks and the daemon runs alive: see the SQLite migration of
-- the same name.
CREATE TABLE phase_shards (
    task_id     BIGINT NOT NULL REFERENCES tasks(id),
    shard       BIGINT NOT NULL,
    shards      BIGINT NOT NULL,
    lease_owner TEXT,
    expires_at  BIGINT,
    state       TEXT,
    progress    TEXT,
    result      TEXT,
    done        BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, shard)
);

-- The daemon runs alive on this database, each renewed with its leases: a
-- daemon takes its fair share of a sharded task's shards (the shards over
-- the daemons alive), so that three daemons run three shards, not one
-- daemon all of them.
CREATE TABLE daemon_runs (
    run_id      TEXT PRIMARY KEY,
    seen_until  BIGINT NOT NULL
);
