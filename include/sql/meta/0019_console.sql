-- zonesync meta store, schema version 19: what the operator console reads (docs/console.md).
--
-- lag_samples: each applier's lag per source, kept at a 10 s resolution (the largest
-- figure seen in the bucket), so a day of six zone pairs is about 52k rows. Appliers
-- prune rows older than LAG_SAMPLES_KEEP_S (console/lag.py) as they write.
CREATE TABLE IF NOT EXISTS lag_samples (
    source_zone     VARCHAR(16)  NOT NULL,
    target_zone     VARCHAR(16)  NOT NULL,
    -- the bucket's start, in whole seconds since the epoch (a multiple of 10)
    bucket          BIGINT       NOT NULL,
    behind_events   BIGINT       NOT NULL,
    behind_seconds  DOUBLE       NOT NULL,
    PRIMARY KEY (source_zone, target_zone, bucket),
    KEY idx_lag_samples_bucket (bucket)
) ENGINE=InnoDB;

-- The console pages every kind of run by its start, newest first.
ALTER TABLE switches ADD INDEX IF NOT EXISTS idx_switches_created (created_at);
ALTER TABLE copies ADD INDEX IF NOT EXISTS idx_copies_created (created_at);
ALTER TABLE checks ADD INDEX IF NOT EXISTS idx_checks_created (created_at);
ALTER TABLE migrations ADD INDEX IF NOT EXISTS idx_migrations_created (created_at);
