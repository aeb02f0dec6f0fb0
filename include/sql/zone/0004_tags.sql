-- zonesync bookkeeping, data tagging (docs/tagging.md): each zone's tag store, kept by
-- its tagger beside the rows it describes.

-- The tag store is a log (include/zonesync/tagging/tag_store.py): each batch of the
-- tagger appends one segment per (entity, repo, table) it touched, its entries as lines
-- `idx <tab> version <tab> deleted` (idx: the unique key's values as JSON; rows sharing
-- them, NULLs in a unique key, are one entry, S004-10). An entity's rows are its
-- segments folded in batch order, the newest entry per idx winning; a change that takes
-- a row out of an entity leaves a deleted entry in it, so a late or replayed older
-- change never revives it. Compaction folds an entity's segments into one.
CREATE TABLE IF NOT EXISTS zonesync.tag_segments (
    entity_type     VARCHAR(32)  NOT NULL,
    entity_id       VARCHAR(128) NOT NULL,
    repo            VARCHAR(64)  NOT NULL,
    table_name      VARCHAR(64)  NOT NULL,
    batch_no        BIGINT       NOT NULL,
    entries         MEDIUMTEXT   NOT NULL,
    PRIMARY KEY (entity_type, entity_id, repo, table_name, batch_no)
) ENGINE=InnoDB;

-- The last batch number written: each batch moves it on by one, compare-and-set, in the
-- batch's transaction (batch numbers order the fold; a second writer fails, never
-- interleaves); and the tag rules version the tagger tags by (a backfill of a rule starts
-- once the tagger has it: every change from then on is tagged live).
CREATE TABLE IF NOT EXISTS zonesync.tag_writer (
    id              TINYINT      NOT NULL PRIMARY KEY,
    last_batch      BIGINT       NOT NULL,
    rules_version   BIGINT       NOT NULL DEFAULT 0
) ENGINE=InnoDB;
INSERT IGNORE INTO zonesync.tag_writer (id, last_batch) VALUES (1, 0);

-- The backfill's progress (spark_jobs/tag_backfill.py): a chunk of a table's key range
-- done, committed in the same transaction as its segments (resume = skip these). Its
-- segments are numbered below zero (-(start second * 10^6 + chunk)): a backfill never
-- takes a number from the tagger's sequence, and its rows, read before the changes the
-- tagger appends, fold before them.
CREATE TABLE IF NOT EXISTS zonesync.tag_backfill (
    run_id          VARCHAR(64)  NOT NULL,
    repo            VARCHAR(64)  NOT NULL,
    table_name      VARCHAR(64)  NOT NULL,
    chunk_no        INT          NOT NULL,
    plan_lo         BIGINT       NULL,      -- the run's first key: chunk n is plan_lo + n * chunk_rows ..
    chunk_rows      INT          NOT NULL,  -- (kept so a resumed run cuts the same chunks)
    batch_no        BIGINT       NOT NULL,
    rows_tagged     BIGINT       NOT NULL,
    done_at         TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (run_id, repo, table_name, chunk_no)
) ENGINE=InnoDB;

-- Session 18's tag store, a row per tag updated in place (a fifth of the rate the log
-- takes): superseded; tags are rebuilt from the topics or by the backfill.
DROP TABLE IF EXISTS zonesync.tags;

-- How far the tagger has tagged each source's partition, committed in the same
-- transaction as the tags (resume = re-read this; "tagged up to P" for a migration).
CREATE TABLE IF NOT EXISTS zonesync.tag_state (
    source_zone     VARCHAR(16)  NOT NULL,
    partition_no    INT          NOT NULL,
    applied_lsn     BIGINT       NOT NULL,
    kafka_offset    BIGINT       NOT NULL,
    updated_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (source_zone, partition_no)
) ENGINE=InnoDB;
