-- zonesync meta store, schema version 6: who may capture a zone, and since when it does.
--
-- replicator_leases (seed S001-11, 注意 secondary 不负责热备份复制): at most one replicator
-- process reads a zone's binlog and writes its checkpoints. The holder renews the lease
-- in the same transaction as every checkpoint it saves, so a process that lost the lease
-- (paused past it, cut off from meta) can never move the checkpoint again; a second
-- process waits as a standby and takes over when the lease expires, or at once when the
-- holder's process is gone from the same host.
CREATE TABLE IF NOT EXISTS replicator_leases (
    zone         VARCHAR(16)  NOT NULL PRIMARY KEY,
    holder       VARCHAR(255) NOT NULL,
    server_id    INT          NOT NULL,
    expires_at   TIMESTAMP(6) NOT NULL,
    acquired_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;

-- capture_starts (seed S001-09, init_info duplicating=true): a zone's capture started
-- here, at this binlog position. It is written with the zone's first checkpoint and is
-- never deleted with the checkpoint history, so a replicator that finds this row but no
-- checkpoint knows the history was lost and refuses to start at the binlog end (which
-- would skip every change since). Only `zonesync binlog bootstrap` sets a new start.
CREATE TABLE IF NOT EXISTS capture_starts (
    zone         VARCHAR(16)  NOT NULL PRIMARY KEY,
    log_file     VARCHAR(255) NOT NULL,
    log_pos      BIGINT       NOT NULL,
    started_by   VARCHAR(255) NOT NULL,
    started_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
