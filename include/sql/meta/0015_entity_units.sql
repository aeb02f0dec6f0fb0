-- zonesync meta store, schema version 15: each locating entity's unit by version
-- (docs/entities.md, "Owner precedence").
--
-- locating_entities holds each entity's newest state, updated in place. An applier's
-- owners check (apply/loop/owner_history.py) must judge an event by the entity's unit in
-- the versions in force when the row was written, so every entity change also appends its
-- unit here, with the version that made it (published at versions.created_at).
CREATE TABLE IF NOT EXISTS entity_units (
    version     BIGINT       NOT NULL,
    le_type     VARCHAR(32)  NOT NULL,
    le_id       VARCHAR(128) NOT NULL,
    unit_zone   SMALLINT     NOT NULL,
    stop_write  TINYINT      NOT NULL DEFAULT 0,
    PRIMARY KEY (version, le_type, le_id)
) ENGINE=InnoDB;

INSERT IGNORE INTO entity_units (version, le_type, le_id, unit_zone, stop_write)
    SELECT version, le_type, le_id, unit_zone, stop_write FROM locating_entities;
