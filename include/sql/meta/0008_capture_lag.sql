-- zonesync meta store, schema version 8: how far each zone's replicator is behind its binlog.
--
-- apply_lag measures broker -> target only. A replicator that reads its binlog slowly (a
-- slow link to its zone, or to the broker) leaves commits unpublished while every applier
-- reports 0 behind (seed S000-68). Each replicator therefore reports, every second, where
-- it reads, how many binlog bytes lie after that, and how old the last event it read is
-- when it is not at the end (MySQL's Seconds_Behind_Master, for the capture side).
CREATE TABLE IF NOT EXISTS capture_lag (
    zone            VARCHAR(16)  NOT NULL PRIMARY KEY,
    log_file        VARCHAR(255) NOT NULL,
    log_pos         BIGINT       NOT NULL,
    behind_bytes    BIGINT       NOT NULL,
    behind_seconds  DOUBLE       NOT NULL,
    updated_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
