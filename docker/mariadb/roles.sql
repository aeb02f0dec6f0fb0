-- zonesync's database accounts, one per role, least privilege (docs/security.md).
-- MariaDB 10.11 syntax. Run as root on every zone and on the meta store (each server
-- gets every account; an account has no rights on a schema the server does not hold),
-- then roles-zone.sql on the zones (grants on tables only a zone has).
-- The accounts are created without a password and locked: the deployment sets each
-- one's password and unlocks it (docker/mariadb/initdb/20-zonesync-roles.sh from
-- docker/.env; the role test, tests/integration/foundation/test_role_accounts.py,
-- runs every worker under its account on a private MariaDB from this same file).
-- sql_log_bin = 0: account management is local to each server and must never reach
-- the binlog that a replicator turns into change events.
SET SESSION sql_log_bin = 0;

-- The replicator: reads the zone's binlog as a replica does (REPLICATION SLAVE), lists
-- and positions binlog files (BINLOG MONITOR) and purges the files every replicator
-- has read (BINLOG ADMIN: PURGE BINARY LOGS, safe purge); it reads the application
-- tables' definitions (their primary keys) and no other schema. `zonesync zones
-- set-primary` runs as this account too: it asks a promoted replica whether it still
-- replicates (SLAVE MONITOR: SHOW ALL SLAVES STATUS) and reads its binlog events.
CREATE USER IF NOT EXISTS 'zs_replicator'@'%' ACCOUNT LOCK;
GRANT REPLICATION SLAVE, BINLOG MONITOR, BINLOG ADMIN, SLAVE MONITOR ON *.* TO 'zs_replicator'@'%';
GRANT SELECT ON `zonesync_app`.* TO 'zs_replicator'@'%';

-- The applier: rows of the application schema and its own bookkeeping schema
-- (apply_state, tombstones, row locks, copy state). Its writes carry the binlog's
-- skip_replication flag, which MariaDB lets any session set (no privilege needed).
-- The zone's tagger runs as this account too: the tag store is bookkeeping, staged
-- through a temporary table (CREATE TEMPORARY TABLES).
CREATE USER IF NOT EXISTS 'zs_applier'@'%' ACCOUNT LOCK;
GRANT SELECT, INSERT, UPDATE, DELETE ON `zonesync_app`.* TO 'zs_applier'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE TEMPORARY TABLES ON `zonesync`.* TO 'zs_applier'@'%';

-- The application, through the guard (zonesync.dal): its own rows (and the tombstones
-- its deletes leave: roles-zone.sql, as a table grant needs the table).
CREATE USER IF NOT EXISTS 'zs_app'@'%' ACCOUNT LOCK;
GRANT SELECT, INSERT, UPDATE, DELETE ON `zonesync_app`.* TO 'zs_app'@'%';

-- Batch work from Airflow and its Spark jobs: the consistency check reads, the full
-- copy and the check's repair write rows and their copy state (with skip_replication,
-- as the applier does), the zone switch reads. The copy stages rows in tables of the
-- bookkeeping schema (created, emptied and dropped there: CREATE, DROP), and the copy
-- and the switch wait for the appliers to reach each zone's binlog end (BINLOG MONITOR).
CREATE USER IF NOT EXISTS 'zs_batch'@'%' ACCOUNT LOCK;
GRANT SELECT, INSERT, UPDATE, DELETE ON `zonesync_app`.* TO 'zs_batch'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP ON `zonesync`.* TO 'zs_batch'@'%';
GRANT BINLOG MONITOR ON *.* TO 'zs_batch'@'%';

-- Schema changes of the application's tables (the schema_change DAG, its Airflow
-- connections zonesync_schema_<zone>): ALTER and INDEX on the application schema (SELECT:
-- CREATE TABLE ... LIKE reads the definition), and an empty scratch copy of a table in the
-- bookkeeping schema to learn a statement's result first (CREATE, ALTER, INDEX, DROP there).
-- Resuming the tables the change held is a table grant (roles-zone.sql).
CREATE USER IF NOT EXISTS 'zs_schema'@'%' ACCOUNT LOCK;
GRANT SELECT, ALTER, INDEX ON `zonesync_app`.* TO 'zs_schema'@'%';
GRANT SELECT, CREATE, ALTER, INDEX, DROP ON `zonesync`.* TO 'zs_schema'@'%';
-- (and the binlog end of each zone already changed, which the next zone's appliers must reach first)
GRANT BINLOG MONITOR ON *.* TO 'zs_schema'@'%';

-- Every worker's and task's link to the meta store: rows of its schema, no DDL
-- (its migrations run as zs_admin).
CREATE USER IF NOT EXISTS 'zs_meta'@'%' ACCOUNT LOCK;
GRANT SELECT, INSERT, UPDATE, DELETE ON `zonesync_meta`.* TO 'zs_meta'@'%';

-- Schema changes: `zonesync meta migrate` and `zonesync zone migrate` (zonesync's own
-- schemas, never the application's), run by an operator, not by a worker.
CREATE USER IF NOT EXISTS 'zs_admin'@'%' ACCOUNT LOCK;
GRANT ALL PRIVILEGES ON `zonesync_meta`.* TO 'zs_admin'@'%';
GRANT ALL PRIVILEGES ON `zonesync`.* TO 'zs_admin'@'%';
