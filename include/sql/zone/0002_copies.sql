-- zonesync bookkeeping, online full copy (docs/copy.md): what a copy into this zone is
-- doing, kept beside the rows it describes.

-- Tables a full copy is filling in this zone. While a table is listed, this zone's
-- appliers apply its changes the way the copy's incremental half must (seed 000,
-- Incremental Copy): an insert or update lands as an upsert of the full new row and a
-- delete as a delete with its tombstone, each only if newer than the target row and its
-- tombstone; never a wait or a row lock (the copy may not have brought the old row yet).
CREATE TABLE IF NOT EXISTS zonesync.copy_tables (
    table_name      VARCHAR(64)  NOT NULL PRIMARY KEY,
    run_id          VARCHAR(250) NOT NULL,
    since           TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;

-- A copy's key-range chunks into this zone. A chunk's row is set 'done' in the same
-- transaction as the rows it merged, so a copy killed at any point re-runs exactly the
-- chunks that did not commit (Vitess keeps copy_state the same way).
CREATE TABLE IF NOT EXISTS zonesync.copy_chunks (
    run_id          VARCHAR(250) NOT NULL,
    table_name      VARCHAR(64)  NOT NULL,
    chunk_no        INT          NOT NULL,
    lo              VARCHAR(512) NULL,
    hi              VARCHAR(512) NULL,
    status          VARCHAR(16)  NOT NULL DEFAULT 'pending',
    rows_read       BIGINT       NOT NULL DEFAULT 0,
    rows_landed     BIGINT       NOT NULL DEFAULT 0,
    done_at         TIMESTAMP(6) NULL,
    PRIMARY KEY (run_id, table_name, chunk_no)
) ENGINE=InnoDB;
