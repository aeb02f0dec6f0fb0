-- zonesync bookkeeping, online full copy (docs/copy.md): whether the target held no row
-- of a table when its copy began (recorded once, by the first start_incremental). Rows
-- only the target holds can then only be rows the stream brought, which are never
-- stale, so the row copy skips its search for them (the anti-join of both zones' keys).
ALTER TABLE zonesync.copy_tables ADD COLUMN IF NOT EXISTS target_was_empty TINYINT NOT NULL DEFAULT 0;
