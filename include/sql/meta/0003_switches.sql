-- zonesync meta store, schema version 3: zone switches (seed 000, "Zone 切换").

-- One row per switch run, keyed by the Airflow run id. Every step writes what it
-- decided here before it acts on it, so a retried step re-reads its own
-- decisions instead of making new ones (record_state never overwrites the
-- recorded version; block/reshard/activate reuse the version they published).
CREATE TABLE IF NOT EXISTS switches (
    id                BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run_id            VARCHAR(250) NOT NULL,
    zsids             TEXT         NOT NULL,
    from_zone         VARCHAR(16)  NOT NULL,
    to_zone           VARCHAR(16)  NOT NULL,
    reason            VARCHAR(500) NOT NULL,
    actor             VARCHAR(128) NOT NULL,
    status            VARCHAR(16)  NOT NULL DEFAULT 'running',
    -- running, then activating (past the point of no return) or rolling_back: never both
    phase             VARCHAR(16)  NOT NULL DEFAULT 'running',
    recorded_version  BIGINT       NULL,
    block_version     BIGINT       NULL,
    reshard_version   BIGINT       NULL,
    active_version    BIGINT       NULL,
    rollback_version  BIGINT       NULL,
    blocked_at        TIMESTAMP(6) NULL,
    block_acked_at    TIMESTAMP(6) NULL,
    resharding_at     TIMESTAMP(6) NULL,
    sync_file         VARCHAR(255) NULL,
    sync_pos          BIGINT       NULL,
    synced_at         TIMESTAMP(6) NULL,
    activated_at      TIMESTAMP(6) NULL,
    detail            TEXT         NULL,
    created_at        TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    finished_at       TIMESTAMP(6) NULL,
    UNIQUE KEY uq_switch_run (run_id)
) ENGINE=InnoDB;

-- Each step's start, end, outcome and detail, per switch: `zonesync switch status`.
CREATE TABLE IF NOT EXISTS switch_steps (
    switch_id    BIGINT       NOT NULL,
    step         VARCHAR(32)  NOT NULL,
    attempt      INT          NOT NULL DEFAULT 1,
    status       VARCHAR(16)  NOT NULL,
    started_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    finished_at  TIMESTAMP(6) NULL,
    detail       TEXT         NULL,
    PRIMARY KEY (switch_id, step)
) ENGINE=InnoDB;

-- ZSID leases: a switch (or, later, a migration) holds its ZSIDs from preflight to
-- its end, so two movers never touch the same ZSIDs. Taken under the head-row lock.
CREATE TABLE IF NOT EXISTS zsid_leases (
    holder       VARCHAR(250) NOT NULL,
    kind         VARCHAR(16)  NOT NULL,
    zsid_lo      BIGINT       NOT NULL,
    zsid_hi      BIGINT       NOT NULL,
    acquired_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (holder, zsid_lo)
) ENGINE=InnoDB;
