-- zonesync meta store, schema version 16: Multi-Geo migrations of a biz entity's locating
-- entities (docs/migration.md).
--
-- One row per migration run, keyed by the Airflow run id. A step writes what it decided
-- here before acting on it (the LEs moved, each version it published, the source's binlog
-- position), so a retried step reads its own decision back. Times are meta's clock.
CREATE TABLE IF NOT EXISTS migrations (
    id             BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run_id         VARCHAR(250) NOT NULL,
    be_type        VARCHAR(32)  NOT NULL,
    be_id          VARCHAR(128) NOT NULL,
    source_zone    VARCHAR(16)  NOT NULL,
    target_zone    VARCHAR(16)  NOT NULL,
    mode           VARCHAR(16)  NOT NULL,
    -- [[le_type, le_id], ...]: the locating entities moved, as registered at preflight
    les_json       TEXT         NOT NULL,
    reason         VARCHAR(500) NOT NULL,
    actor          VARCHAR(128) NOT NULL,
    -- running, then succeeded, failed or rolled_back
    status         VARCHAR(16)  NOT NULL DEFAULT 'running',
    -- preflight, stopped, synced, verified, flipping (the point of no return), lifted; rolling_back
    phase          VARCHAR(24)  NOT NULL DEFAULT 'preflight',
    stop_version   BIGINT       NULL,
    stopped_at     TIMESTAMP(6) NULL,
    -- [binlog file, position] of the source once no write of the LEs can follow it
    position_json  TEXT         NULL,
    flip_version   BIGINT       NULL,
    flipped_at     TIMESTAMP(6) NULL,
    lift_version   BIGINT       NULL,
    lifted_at      TIMESTAMP(6) NULL,
    detail         TEXT         NULL,
    created_at     TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at     TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    finished_at    TIMESTAMP(6) NULL,
    UNIQUE KEY uq_migrations_run (run_id),
    KEY idx_migrations_be (be_type, be_id, status)
) ENGINE=InnoDB;
