-- zonesync bookkeeping inside every zone, database `zonesync`, written by the
-- applier in the same transaction as the application rows it describes.

CREATE DATABASE IF NOT EXISTS zonesync;

-- The applied LSN per (source zone, partition) and the Kafka offset it came from:
-- restart seeks from here, never from consumer-group offsets.
CREATE TABLE IF NOT EXISTS zonesync.apply_state (
    source_zone     VARCHAR(16)  NOT NULL,
    partition_no    INT          NOT NULL,
    applied_lsn     BIGINT       NOT NULL,
    kafka_offset    BIGINT       NOT NULL,
    status          VARCHAR(16)  NOT NULL DEFAULT 'running',
    detail          VARCHAR(512) NOT NULL DEFAULT '',
    updated_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (source_zone, partition_no)
) ENGINE=InnoDB;
-- Events of the partition's chain committed here since it began (applied, skipped as
-- older or replayed, or held by a lock: every accepted event once), in the same
-- transaction as the position: `zonesync reconcile` compares it with what was published.
ALTER TABLE zonesync.apply_state ADD COLUMN IF NOT EXISTS events BIGINT NOT NULL DEFAULT 0;

-- Deleted rows, so a late or resent older insert never resurrects them.
CREATE TABLE IF NOT EXISTS zonesync.tombstones (
    table_name      VARCHAR(64)  NOT NULL,
    pk              VARCHAR(512) NOT NULL,
    version         BIGINT       NOT NULL,
    deleted_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (table_name, pk),
    KEY idx_tombstones_age (deleted_at)
) ENGINE=InnoDB;

-- Locked rows (数据锁定): a change whose old row did not match; held until resolved.
CREATE TABLE IF NOT EXISTS zonesync.row_locks (
    table_name      VARCHAR(64)  NOT NULL,
    pk              VARCHAR(512) NOT NULL,
    reason          VARCHAR(512) NOT NULL,
    first_event     LONGTEXT     NOT NULL,
    held_events     INT          NOT NULL DEFAULT 0,
    locked_at       TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (table_name, pk)
) ENGINE=InnoDB;
