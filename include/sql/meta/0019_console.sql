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

-- The console pages every kind of run by its start, newest first (the run id tells apart
-- runs started in the same microsecond).
ALTER TABLE switches ADD INDEX IF NOT EXISTS idx_switches_created (created_at, run_id);
ALTER TABLE copies ADD INDEX IF NOT EXISTS idx_copies_created (created_at, run_id);
ALTER TABLE checks ADD INDEX IF NOT EXISTS idx_checks_created (created_at, run_id);
ALTER TABLE migrations ADD INDEX IF NOT EXISTS idx_migrations_created (created_at, run_id);

-- A tag backfill's run (spark_jobs/tag_backfill.py), for the console and `zonesync runs`:
-- the job's driver writes its plan and, after each wave, what it has done; a resumed run
-- (the same run id) goes on in the same row. The chunk marks themselves live in the
-- zone's zonesync.tag_backfill, with the tags.
CREATE TABLE IF NOT EXISTS backfills (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run_id          VARCHAR(250) NOT NULL,
    -- the Airflow run that started the latest attempt (the run id may be a backfill_id)
    airflow_run_id  VARCHAR(250) NULL,
    zone            VARCHAR(16)  NOT NULL,
    tables_json     TEXT         NOT NULL,
    -- running, then succeeded or failed (a killed job leaves running; its retry goes on)
    status          VARCHAR(16)  NOT NULL DEFAULT 'running',
    phase           VARCHAR(24)  NOT NULL DEFAULT 'tagging',
    chunks          INT          NOT NULL DEFAULT 0,
    chunks_done     INT          NOT NULL DEFAULT 0,
    rows_tagged     BIGINT       NOT NULL DEFAULT 0,
    -- the latest attempt: when it started and what was done before it (its rate is its own)
    attempt_at      TIMESTAMP(6) NULL,
    attempt_chunks  INT          NOT NULL DEFAULT 0,
    attempt_rows    BIGINT       NOT NULL DEFAULT 0,
    detail          TEXT         NULL,
    created_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    finished_at     TIMESTAMP(6) NULL,
    UNIQUE KEY uq_backfills_run (run_id),
    KEY idx_backfills_created (created_at, run_id)
) ENGINE=InnoDB;
