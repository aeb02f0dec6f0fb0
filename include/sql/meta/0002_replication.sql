-- zonesync meta store, schema version 2: replication state that is not the data's.

-- Replicator checkpoints: every confirmed position, kept as history so a resend
-- or a replay can restart from an older one and regenerate identical LSNs and
-- prev_lsn chains (partition_lsns: the last LSN published per partition).
CREATE TABLE IF NOT EXISTS replicator_checkpoints (
    zone            VARCHAR(16)  NOT NULL,
    lsn             BIGINT       NOT NULL,
    log_file        VARCHAR(255) NOT NULL,
    log_pos         BIGINT       NOT NULL,
    partition_lsns  LONGTEXT     NOT NULL,
    published_hwm   BIGINT       NOT NULL DEFAULT 0,
    created_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (zone, lsn)
) ENGINE=InnoDB;

-- An applier asks a replicator to send a partition again from an LSN.
CREATE TABLE IF NOT EXISTS resend_requests (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    source_zone     VARCHAR(16)  NOT NULL,
    target_zone     VARCHAR(16)  NOT NULL,
    partition_no    INT          NOT NULL,
    from_lsn        BIGINT       NOT NULL,
    status          VARCHAR(16)  NOT NULL DEFAULT 'pending',
    detail          VARCHAR(512) NOT NULL DEFAULT '',
    created_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    done_at         TIMESTAMP(6) NULL,
    KEY idx_resend_pending (source_zone, status)
) ENGINE=InnoDB;

-- Alerts: halted partitions, locked rows, purge refusals. Operators list and ack them.
CREATE TABLE IF NOT EXISTS alerts (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at              TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    zone            VARCHAR(16)  NOT NULL,
    kind            VARCHAR(32)  NOT NULL,
    detail          LONGTEXT     NOT NULL,
    acked           TINYINT(1)   NOT NULL DEFAULT 0,
    KEY idx_alerts_open (acked, at)
) ENGINE=InnoDB;

-- Lag per (source zone, target zone, partition), refreshed by appliers.
CREATE TABLE IF NOT EXISTS apply_lag (
    source_zone     VARCHAR(16)  NOT NULL,
    target_zone     VARCHAR(16)  NOT NULL,
    partition_no    INT          NOT NULL,
    applied_lsn     BIGINT       NOT NULL,
    behind_events   BIGINT       NOT NULL,
    behind_seconds  DOUBLE       NOT NULL,
    updated_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (source_zone, target_zone, partition_no)
) ENGINE=InnoDB;
