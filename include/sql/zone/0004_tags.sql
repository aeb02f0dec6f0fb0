-- zonesync bookkeeping, data tagging (docs/tagging.md): each zone's tag store, kept by
-- its tagger beside the rows it describes.

-- One tag per (repo, table, unique-key values) of a registered table: the locating entity
-- the row belongs to. A delete leaves the tag marked deleted with its version, so a late
-- or replayed older change never revives it; a change applies only if its version is not
-- older than the tag's (rows whose unique key moved between rows stay right in any order).
-- idx_data is the index_keys' values in the rule's order, as JSON: rows sharing them
-- (NULLs in a unique key) share one tag and are fetched once (S004-10).
CREATE TABLE IF NOT EXISTS zonesync.tags (
    repo            VARCHAR(64)  NOT NULL,
    table_name      VARCHAR(64)  NOT NULL,
    idx_data        VARCHAR(512) NOT NULL,
    entity_type     VARCHAR(32)  NOT NULL,
    entity_id       VARCHAR(128) NOT NULL,
    version         BIGINT       NOT NULL,
    deleted         TINYINT(1)   NOT NULL DEFAULT 0,
    PRIMARY KEY (repo, table_name, idx_data),
    KEY idx_tags_entity (entity_type, entity_id)
) ENGINE=InnoDB;

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
