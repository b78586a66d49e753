-- An archived plan is kept whole, with its history, but is out of the way:
-- listings leave it out, no client may change it, and the daemon runs none of
-- its phase tasks, until it is restored. NULL: live.
ALTER TABLE plans ADD COLUMN archived_at INTEGER;
