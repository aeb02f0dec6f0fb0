-- zonesync bookkeeping, replaced keys (docs/migration.md, "Replaced keys"; seed 004's
-- need-replace-pk): a migration moving a `replace_key` resident table's rows into this
-- zone gives each row a new key from this zone's own AUTO_INCREMENT (the source's key may
-- be another row's here) and keeps which source key became which, so that every later
-- change of the row, arriving with the source's key, lands on the row it became and never
-- on whatever row holds that key here (S004-35/38).
--
-- One entry per run, table and source key, claimed (and locked to its commit) by every
-- write of that key: the stock copy's merge and the applier's events take turns on it.
--   target_key  the row's key here; NULL: not landed yet, or deleted (version > 0)
--   version     the newest version of the source row landed or deleted here: a change at
--               or below it is older, and changes nothing
-- Kept after the migration: the record of the keys it replaced.
CREATE TABLE IF NOT EXISTS zonesync.key_map (
    run_id          VARCHAR(250)  NOT NULL,
    table_name      VARCHAR(64)   NOT NULL,
    source_key      BIGINT        NOT NULL,
    target_key      BIGINT        NULL,
    version         BIGINT        NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, table_name, source_key),
    UNIQUE KEY uk_key_map_target (run_id, table_name, target_key)
) ENGINE=InnoDB;
