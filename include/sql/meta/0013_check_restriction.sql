-- zonesync meta store, schema version 13: a check restricted to some ZSIDs (the zone
-- switch's verify, docs/switch.md).
--
-- zsids_json: [[lo, hi], ...] the rows compared (by the check's rules version); NULL:
-- every row. exclude_origin: rows written by this zone id are left out on every side
-- (the switch's new owner: what it wrote since activation is on its way back); a key
-- whose row carries it in any zone is not reported.
ALTER TABLE checks ADD COLUMN IF NOT EXISTS zsids_json TEXT NULL;
ALTER TABLE checks ADD COLUMN IF NOT EXISTS exclude_origin SMALLINT NULL;
