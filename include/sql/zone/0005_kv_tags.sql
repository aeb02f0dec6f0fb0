-- zonesync bookkeeping, KV tagging (docs/kv.md): the KV tagger of a zone follows each of
-- its KV repos' change logs (the stream `zonesync:changes` the KV guard writes in one
-- MULTI with each key's change) into the same tag store as rows: segments of repo = the
-- KV repo, table_name '' (a key), idx the key as JSON, version from the stream entry id.

-- How far each repo's log is tagged: the stream id of its last entry tagged, committed
-- in the same transaction as the segments (resume = read on after it; "tagged up to").
CREATE TABLE IF NOT EXISTS zonesync.tag_kv_state (
    repo            VARCHAR(64)  NOT NULL PRIMARY KEY,
    stream_id       VARCHAR(41)  NOT NULL,  -- <ms>-<seq>
    updated_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;

-- The KV tagger numbers its batches on a writer row of its own (row 1 is the row
-- tagger's): the two never write the same (entity, repo, table), so each fold is
-- ordered by one writer's numbers, and neither fails the other's compare-and-set.
INSERT IGNORE INTO zonesync.tag_writer (id, last_batch) VALUES (2, 0);
