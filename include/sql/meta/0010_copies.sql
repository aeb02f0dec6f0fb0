-- zonesync meta store, schema version 10: online full copies (docs/copy.md).
--
-- One row per copy run, keyed by the Airflow run id. What a step decides is written
-- here before it acts on it (the start positions, the tables), so a retried step reads
-- its own decision back. The chunks' progress lives in the target zone
-- (zonesync.copy_chunks), committed with the rows it describes.
CREATE TABLE IF NOT EXISTS copies (
    id                BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run_id            VARCHAR(250) NOT NULL,
    source_zone       VARCHAR(16)  NOT NULL,
    target_zone       VARCHAR(16)  NOT NULL,
    mode              VARCHAR(16)  NOT NULL,
    tables_json       TEXT         NOT NULL,
    reason            VARCHAR(500) NOT NULL,
    actor             VARCHAR(128) NOT NULL,
    -- running, then succeeded, failed or rolled_back
    status            VARCHAR(16)  NOT NULL DEFAULT 'running',
    phase             VARCHAR(24)  NOT NULL DEFAULT 'preflight',
    -- {source zone: {partition: [applied LSN, Kafka offset]}}: where the target's appliers
    -- replay from while the rows are copied (record_start, written once)
    start_json        LONGTEXT     NULL,
    -- what the target's apply_state held before the copy moved it (rollback puts it back)
    before_json       LONGTEXT     NULL,
    -- {zone: [binlog file, position]} read when the row copy ended: catch_up waits until the
    -- target applied every source up to here
    end_json          LONGTEXT     NULL,
    detail            TEXT         NULL,
    created_at        TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at        TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    finished_at       TIMESTAMP(6) NULL,
    UNIQUE KEY uq_copies_run (run_id),
    KEY idx_copies_target (target_zone, status)
) ENGINE=InnoDB;
