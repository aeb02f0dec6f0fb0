-- zonesync meta store, schema version 4: gates of the zone switch
-- (include/zonesync/switch/gate.py).
--
-- reshard, wait_sync and activate start together with block and wait at a gate
-- for their predecessor's stamp in `switches`. A row here says a gated task is
-- at its gate: a task waiting for its predecessor reads it to know that the
-- predecessor has started without asking the orchestrator (Airflow's API server
-- can take seconds to answer under load). `left_at` is set when the task went
-- away without passing (rescheduled, or the gate closed); a re-entry clears it.
CREATE TABLE IF NOT EXISTS switch_gates (
    switch_id    BIGINT       NOT NULL,
    task         VARCHAR(32)  NOT NULL,
    entered_at   TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    passed_at    TIMESTAMP(6) NULL,
    left_at      TIMESTAMP(6) NULL,
    PRIMARY KEY (switch_id, task)
) ENGINE=InnoDB;
