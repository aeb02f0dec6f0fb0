-- zonesync bookkeeping, resident tables (docs/migration.md, "Resident tables"): the rows
-- of a resident table live only in their entity's unit, and this zone's appliers skip
-- them, except the rows of the entities admitted here: the locating entities a
-- migration is moving into this zone, from their source zone's stream.

-- The entities whose resident rows this zone's appliers apply now, from `source_zone`.
CREATE TABLE IF NOT EXISTS zonesync.resident_admits (
    le_type         VARCHAR(32)  NOT NULL,
    le_id           VARCHAR(128) NOT NULL,
    source_zone     VARCHAR(16)  NOT NULL,
    run_id          VARCHAR(250) NOT NULL,
    since           TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (le_type, le_id)
) ENGINE=InnoDB;

-- One row, its version moved by every change of resident_admits in the same
-- transaction. An applier's transaction that touches a resident table reads it first
-- with a shared lock (held to its commit): a change of the admits waits for every such
-- transaction in flight, and every later one reads the new admits. So once an admit
-- commits, no transaction that skipped the entity's rows is still uncommitted: a stock
-- copy read after it misses nothing the stream skipped (apply/batch/resident.py).
CREATE TABLE IF NOT EXISTS zonesync.resident_admits_head (
    id              TINYINT      NOT NULL PRIMARY KEY,
    version         BIGINT       NOT NULL
) ENGINE=InnoDB;
INSERT IGNORE INTO zonesync.resident_admits_head (id, version) VALUES (1, 0);
