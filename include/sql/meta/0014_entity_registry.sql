-- zonesync meta store, schema version 14: the entity registry (docs/entities.md).
--
-- A biz entity (a tenant: the smallest unit an admin migrates) owns locating entities
-- (the tenant itself, each of its chats or projects); each has its home unit (zone) and a
-- status (ACTIVE, MIGRATING, SYNCING, STOP_WRITE) and the version that last changed it.
-- Sub-entities (rows that follow a locating entity) are declared in the tag rules.
CREATE TABLE IF NOT EXISTS biz_entities (
    be_type     VARCHAR(32)  NOT NULL,
    be_id       VARCHAR(128) NOT NULL,
    unit_zone   SMALLINT     NOT NULL,
    status      VARCHAR(16)  NOT NULL DEFAULT 'ACTIVE',
    version     BIGINT       NOT NULL,
    updated_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (be_type, be_id),
    CONSTRAINT fk_be_zone FOREIGN KEY (unit_zone) REFERENCES zones (zone_id)
) ENGINE=InnoDB;

ALTER TABLE locating_entities ADD COLUMN IF NOT EXISTS be_type VARCHAR(32) NULL;
ALTER TABLE locating_entities ADD COLUMN IF NOT EXISTS be_id VARCHAR(128) NULL;
CREATE INDEX IF NOT EXISTS idx_le_biz ON locating_entities (be_type, be_id);
