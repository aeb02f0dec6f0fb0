-- zonesync meta store, schema version 17: a check restricted to some locating entities'
-- rows (a migration's verify, docs/migration.md).
--
-- entities_json: {"tenant": ["7"], "chat": ["70"]}: only the rows of tables that declare an
-- entity of these types whose entity column holds one of the ids; NULL: every row.
ALTER TABLE checks ADD COLUMN IF NOT EXISTS entities_json TEXT NULL;
