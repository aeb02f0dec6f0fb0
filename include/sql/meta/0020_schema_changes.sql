-- zonesync meta store, schema version 20: the DDL each zone's replicator read in its
-- binlog on the replicated schemas (docs/schema-changes.md). Not replicated by zonesync (a
-- schema change goes to every zone through the schema_change DAG); recorded so that a
-- table held for disagreeing definitions names the statement that made them disagree,
-- and for `zonesync schema log`. A pass that reads the same binlog again records nothing
-- twice (the position is the key).
CREATE TABLE IF NOT EXISTS schema_changes (
    id              BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    zone            VARCHAR(16)   NOT NULL,
    log_file        VARCHAR(255)  NOT NULL,
    log_pos         BIGINT        NOT NULL,
    schema_name     VARCHAR(64)   NOT NULL,
    -- the table the statement changes (the first one named; NULL when none could be read)
    table_name      VARCHAR(64)   NULL,
    statement       TEXT          NOT NULL,
    executed_at     TIMESTAMP(6)  NOT NULL,
    seen_at         TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    UNIQUE KEY uq_schema_changes_position (zone, log_file, log_pos),
    KEY idx_schema_changes_table (table_name, id)
) ENGINE=InnoDB;
