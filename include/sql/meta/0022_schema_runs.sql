-- zonesync meta store, schema version 22: the schema_change DAG's runs (docs/schema-changes.md),
-- for the console's runs list and `zonesync runs`. One row per Airflow run id, written by
-- its preflight once the statement passed; apply and resume move its phase; report ends it.
-- A run whose resume set holds draining stays in phase `draining` after the DAG ends:
-- the zones' appliers drain the parked events then, and the console shows that drain's
-- progress (parked events left per zone against drain_json, the counts at resume).
CREATE TABLE IF NOT EXISTS schema_runs (
    id              BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    run_id          VARCHAR(250)  NOT NULL,
    table_name      VARCHAR(64)   NOT NULL,
    statement       TEXT          NOT NULL,
    zones_json      TEXT          NOT NULL,
    reason          VARCHAR(500)  NOT NULL,
    actor           VARCHAR(128)  NOT NULL,
    -- running, then succeeded or failed
    status          VARCHAR(16)   NOT NULL DEFAULT 'running',
    -- preflight, applying, verified, draining (holds resumed), done
    phase           VARCHAR(24)   NOT NULL DEFAULT 'preflight',
    -- {zone: parked events of the table when its hold was set draining}
    drain_json      TEXT          NULL,
    resumed_at      TIMESTAMP(6)  NULL,
    detail          TEXT          NULL,
    created_at      TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    finished_at     TIMESTAMP(6)  NULL,
    UNIQUE KEY uq_schema_runs_run (run_id),
    KEY idx_schema_runs_created (created_at, run_id)
) ENGINE=InnoDB;
