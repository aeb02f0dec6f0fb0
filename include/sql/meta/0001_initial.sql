-- zonesync meta store (PiMMS / Global Meta), schema version 1.
-- Applied by `zonesync meta migrate` (and `zonesync dev up`); every statement is
-- idempotent so a migration interrupted half-way can simply run again.

CREATE TABLE IF NOT EXISTS zones (
    zone_id     SMALLINT     NOT NULL PRIMARY KEY,
    name        VARCHAR(16)  NOT NULL UNIQUE,
    created_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;

-- One row per published version; versions are strictly increasing and cover both
-- rule sets (kind = 'rules') and locating-entity flag changes (kind = 'entities').
-- A guard runs "version V" = the newest rules with version <= V plus the entity
-- flags as of V. `rule_set` holds the full rule document for kind = 'rules'.
CREATE TABLE IF NOT EXISTS versions (
    version     BIGINT       NOT NULL PRIMARY KEY,
    kind        VARCHAR(16)  NOT NULL,
    author      VARCHAR(128) NOT NULL,
    reason      VARCHAR(512) NOT NULL,
    created_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    rule_set    LONGTEXT     NULL,
    KEY idx_versions_kind (kind, version)
) ENGINE=InnoDB;

-- The newest version, one row: guards poll this cheaply (a primary-key read).
CREATE TABLE IF NOT EXISTS head (
    id          TINYINT      NOT NULL PRIMARY KEY,
    version     BIGINT       NOT NULL,
    updated_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
INSERT IGNORE INTO head (id, version) VALUES (1, 0);

-- ZSID rules of each rules version (ranges inclusive).
CREATE TABLE IF NOT EXISTS zsid_rules (
    version     BIGINT       NOT NULL,
    zsid_lo     BIGINT       NOT NULL,
    zsid_hi     BIGINT       NOT NULL,
    owner_zone  SMALLINT     NOT NULL,
    status      VARCHAR(12)  NOT NULL,
    PRIMARY KEY (version, zsid_lo),
    CONSTRAINT fk_rules_zone FOREIGN KEY (owner_zone) REFERENCES zones (zone_id)
) ENGINE=InnoDB;

-- Guard (PiDAL) instances: registered at start, heartbeat every period, ack the
-- version they run, deregister on exit. Health is derived from last_heartbeat.
CREATE TABLE IF NOT EXISTS guard_instances (
    instance_id     VARCHAR(64)  NOT NULL PRIMARY KEY,
    zone_id         SMALLINT     NOT NULL,
    host            VARCHAR(128) NOT NULL,
    pid             INT          NOT NULL,
    started_at      TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    last_heartbeat  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    period_ms       INT          NOT NULL,
    version_applied BIGINT       NOT NULL DEFAULT 0,
    applied_at      TIMESTAMP(6) NULL,
    KEY idx_guard_zone (zone_id)
) ENGINE=InnoDB;

-- Every ack, for the audit trail of a change ("when did zone b's guards run v7").
CREATE TABLE IF NOT EXISTS guard_acks (
    instance_id VARCHAR(64)  NOT NULL,
    version     BIGINT       NOT NULL,
    acked_at    TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    PRIMARY KEY (instance_id, version)
) ENGINE=InnoDB;

-- Locating entities (Multi-Geo): type/id -> unit, stop-write flag, version.
CREATE TABLE IF NOT EXISTS locating_entities (
    le_type     VARCHAR(32)  NOT NULL,
    le_id       VARCHAR(128) NOT NULL,
    unit_zone   SMALLINT     NOT NULL,
    status      VARCHAR(16)  NOT NULL DEFAULT 'ACTIVE',
    stop_write  TINYINT(1)   NOT NULL DEFAULT 0,
    version     BIGINT       NOT NULL,
    updated_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    PRIMARY KEY (le_type, le_id),
    KEY idx_le_version (version),
    CONSTRAINT fk_le_zone FOREIGN KEY (unit_zone) REFERENCES zones (zone_id)
) ENGINE=InnoDB;

-- Everything that changed, by whom and why.
CREATE TABLE IF NOT EXISTS audit_log (
    id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at          TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    actor       VARCHAR(128) NOT NULL,
    action      VARCHAR(64)  NOT NULL,
    version     BIGINT       NULL,
    detail      LONGTEXT     NOT NULL,
    KEY idx_audit_action (action, at)
) ENGINE=InnoDB;
