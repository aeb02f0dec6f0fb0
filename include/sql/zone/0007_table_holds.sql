-- zonesync bookkeeping, tables held in this zone (docs/schema-changes.md): a table whose
-- definition here disagrees with the events arriving for it (a column renamed, dropped,
-- retyped or added on one side, its primary key changed) is held by this zone's appliers:
-- the events that do not fit are parked, in arrival order, in the same transaction that
-- moves their partitions on (with every later event of their partition), and everything
-- that fits, every other table's included, goes on. Once the definitions agree again, an
-- operator's resume (`zonesync schema resume`, or the schema_change DAG) sets the hold
-- draining: the appliers apply the parked events in order, still parking new ones, and
-- drop the hold in the transaction that applied the last of them.

CREATE TABLE IF NOT EXISTS zonesync.table_holds (
    table_name      VARCHAR(64)   NOT NULL PRIMARY KEY,
    -- held: events parked; draining: resumed, parked events being applied
    status          VARCHAR(16)   NOT NULL DEFAULT 'held',
    -- misfits: only the events that do not fit the table here (their columns or key), and
    -- every later one of their partition, are parked; all: every event of the table (a
    -- value that did not fit, which the columns cannot tell)
    park            VARCHAR(8)    NOT NULL DEFAULT 'all',
    detail          VARCHAR(2000) NOT NULL,
    since           TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    resumed_at      TIMESTAMP(6)  NULL
) ENGINE=InnoDB;

-- A held table's events (ChangeEvent JSON), oldest first by id: a partition's events are
-- parked in its order, so applying them by id keeps every key's order.
CREATE TABLE IF NOT EXISTS zonesync.parked_events (
    id              BIGINT        NOT NULL AUTO_INCREMENT PRIMARY KEY,
    table_name      VARCHAR(64)   NOT NULL,
    source_zone     VARCHAR(16)   NOT NULL,
    partition_no    INT           NOT NULL,
    lsn             BIGINT        NOT NULL,
    event           LONGBLOB      NOT NULL,
    KEY idx_parked_events_table (table_name, id),
    KEY idx_parked_events_partition (table_name, source_zone, partition_no)
) ENGINE=InnoDB;
