-- zonesync meta store, schema version 18: when a migration's stop-write was published.
--
-- The stop-write window starts when the first guard may refuse the tenant's writes, that
-- is when the stop's version is published (in the same transaction, on meta's clock), not
-- when every guard acked it (stopped_at); it ends when every guard acked the lift.
ALTER TABLE migrations ADD COLUMN IF NOT EXISTS stop_published_at TIMESTAMP(6) NULL AFTER stop_version;
