-- zonesync meta store, schema version 11: consistency checks (docs/consistency-check.md).
--
-- One row per check run (keyed by the Airflow run id), its chunks with each zone's
-- numbers, and every difference that persisted once every zone had applied the others
-- up to the check's start. A re-run of the same run id reads its plan and finished
-- chunks back and goes on (resume = re-read state).
CREATE TABLE IF NOT EXISTS checks (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run_id          VARCHAR(250) NOT NULL,
    zones_json      TEXT         NOT NULL,
    tables_json     TEXT         NOT NULL,
    chunk_rows      INT          NOT NULL,
    row_diff        TINYINT(1)   NOT NULL DEFAULT 1,
    repair          TINYINT(1)   NOT NULL DEFAULT 0,
    reason          VARCHAR(500) NOT NULL DEFAULT '',
    actor           VARCHAR(128) NOT NULL,
    -- running, then succeeded (no difference), differences (some found) or failed
    status          VARCHAR(16)  NOT NULL DEFAULT 'running',
    phase           VARCHAR(24)  NOT NULL DEFAULT 'preflight',
    -- the rules version whose owners are "right", and the moment (µs, by the writers'
    -- clocks) before which every write is settled once start_json is applied everywhere
    rules_version   INT          NULL,
    cut_us          BIGINT       NULL,
    -- {zone: [binlog file, position]} read at the start (written once)
    start_json      LONGTEXT     NULL,
    -- per table: rows per zone, chunks, and per zone pair the chunks that differ
    summary_json    LONGTEXT     NULL,
    detail          TEXT         NULL,
    created_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    updated_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    finished_at     TIMESTAMP(6) NULL,
    UNIQUE KEY uq_checks_run (run_id)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS check_chunks (
    run_id          VARCHAR(250) NOT NULL,
    table_name      VARCHAR(64)  NOT NULL,
    chunk_no        INT          NOT NULL,
    lo              VARCHAR(512) NULL,
    hi              VARCHAR(512) NULL,
    -- pending; then match, or differ (looked at again once the zones settled): then
    -- match (the difference was in flight), settled (every differing row was written
    -- after the start) or mismatch (a difference persisted)
    status          VARCHAR(16)  NOT NULL DEFAULT 'pending',
    rows_max        BIGINT       NOT NULL DEFAULT 0,
    -- {zone: [rows, checksum, min _zs_version, rows of an unknown origin, rows with a NULL key]}
    zones_json      TEXT         NULL,
    done_at         TIMESTAMP(6) NULL,
    PRIMARY KEY (run_id, table_name, chunk_no)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS check_diffs (
    id              BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run_id          VARCHAR(250) NOT NULL,
    table_name      VARCHAR(64)  NOT NULL,
    pk              VARCHAR(512) NOT NULL,
    zsid            INT          NULL,
    -- the owner of the row's ZSID by the check's rules version (NULL: no rule covers it)
    right_zone      VARCHAR(16)  NULL,
    -- {zone: "missing" | "extra" | [differing columns]} against the right zone's row
    zones_json      TEXT         NOT NULL,
    -- {zone: {column: canonical text}} of the differing columns, for the report
    values_json     LONGTEXT     NULL,
    UNIQUE KEY uq_check_diffs (run_id, table_name, pk)
) ENGINE=InnoDB;
