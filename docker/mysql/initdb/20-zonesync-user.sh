# shellcheck shell=bash
# Creates the `zonesync` account used by Airflow, Spark and the workers.
#
# Run by the mysql image's entrypoint from /docker-entrypoint-initdb.d, once, on
# the first start with an empty datadir. The file is not executable, so the
# entrypoint *sources* it: no `exit`, no `set -u`, and its docker_process_sql
# helper (root over the init server's socket) is available.
#
# Privileges:
#   ALL on `zonesync\_%`.*         the app schema (zonesync_app) in zones, zonesync_meta
#                                  in the meta store, and zonesync's bookkeeping schemas
#                                  (wildcards in database grants are deprecated in 8.4 but
#                                  honoured; list the schemas once their names are fixed)
#   REPLICATION SLAVE, CLIENT      the replicator reads the binlog as a replica would
#   BINLOG_ADMIN                   safe-purge runs PURGE BINARY LOGS
# sql_log_bin=0: account management is local to this server and must never appear
# in the binlog the replicator turns into change events.

if [ -z "${ZONESYNC_DB_PASSWORD:-}" ]; then
  echo "20-zonesync-user.sh: ZONESYNC_DB_PASSWORD is empty: set it in docker/.env" >&2
  false
fi

docker_process_sql --database=mysql <<SQL
SET SESSION sql_log_bin = 0;
CREATE USER IF NOT EXISTS 'zonesync'@'%'
  IDENTIFIED WITH mysql_native_password BY '${ZONESYNC_DB_PASSWORD}';
GRANT ALL PRIVILEGES ON \`zonesync\\_%\`.* TO 'zonesync'@'%';
GRANT REPLICATION SLAVE, REPLICATION CLIENT, BINLOG_ADMIN ON *.* TO 'zonesync'@'%';
SQL
