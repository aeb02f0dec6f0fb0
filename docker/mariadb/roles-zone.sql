-- The zones' own grants on single tables of zonesync's bookkeeping schema, after
-- roles.sql and the bookkeeping DDL (include/sql/zone/): MariaDB grants on a table
-- only once it exists. The compose runs this file on each zone's first start
-- (/docker-entrypoint-initdb.d/21-zonesync-zone-grants.sql).
SET SESSION sql_log_bin = 0;

-- The guard's delete leaves the applier's tombstone (the row's version + 1) and its
-- update or delete of an absent row reads it: nothing else of the bookkeeping.
GRANT SELECT, INSERT, UPDATE ON `zonesync`.`tombstones` TO 'zs_app'@'%';

-- The schema_change DAG's resume: a held table's hold set draining (docs/schema-changes.md).
GRANT SELECT, UPDATE ON `zonesync`.`table_holds` TO 'zs_schema'@'%';
