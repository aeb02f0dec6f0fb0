-- zonesync meta store, schema version 21: the servers a zone's capture has read, in order
-- (docs/failover.md). A zone's primary is replaced by its replica: the replica's binlog
-- holds the same transactions (same GTIDs) at other files and positions, so capture goes
-- on from the position matching its checkpoint's GTID state on the new server, as a new
-- segment. LSNs are derived from binlog positions; a segment's LSNs use the binlog file
-- number plus lsn_file_offset, chosen so that every LSN of the new segment is above every
-- LSN published before it: the consumers' chains go on, nothing is skipped as applied.
-- Segment 0 is the first server (its row written by the first replicator pass, with
-- offset 0); the newest segment names the zone's primary for the workers.
CREATE TABLE IF NOT EXISTS capture_segments (
    zone             VARCHAR(16)   NOT NULL,
    segment          INT           NOT NULL,
    host             VARCHAR(255)  NOT NULL,
    port             INT           NOT NULL,
    server_id        BIGINT        NOT NULL,
    -- where capture began on this server, and the GTID state there
    first_file       VARCHAR(255)  NOT NULL,
    first_pos        BIGINT        NOT NULL,
    gtid_pos         VARCHAR(2048) NULL,
    lsn_file_offset  INT           NOT NULL DEFAULT 0,
    -- every LSN of this segment is above it (the segment's first checkpoint's key)
    lsn_floor        BIGINT        NOT NULL DEFAULT 0,
    -- transactions the old primary wrote that this server never received (forced promotion)
    lost_gtids       VARCHAR(2048) NULL,
    created_by       VARCHAR(255)  NOT NULL,
    created_at       TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (zone, segment)
) ENGINE=InnoDB;

-- A checkpoint names the server it was read on (its segment) and the GTID state at its
-- position, so that the position can be found again on another server holding the log.
ALTER TABLE replicator_checkpoints ADD COLUMN IF NOT EXISTS segment INT NOT NULL DEFAULT 0;
ALTER TABLE replicator_checkpoints ADD COLUMN IF NOT EXISTS gtid_pos VARCHAR(2048) NULL;
