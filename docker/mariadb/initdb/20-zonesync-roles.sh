# shellcheck shell=bash
# zonesync's accounts, one per role (docker/mariadb/roles.sql, docs/security.md), each
# given its password from docker/.env and unlocked.
#
# Run by the mariadb image's entrypoint from /docker-entrypoint-initdb.d, once, on the
# first start with an empty datadir. The file is not executable, so the entrypoint
# *sources* it: no `exit`, no `set -u`, and its docker_process_sql helper (root over the
# init server's socket) is available. roles.sql is mounted beside it.
# sql_log_bin=0: account management is local to this server and must never appear in
# the binlog the replicator turns into change events.

for var in ZONESYNC_REPLICATOR_PASSWORD ZONESYNC_APPLIER_PASSWORD ZONESYNC_APP_PASSWORD \
           ZONESYNC_BATCH_PASSWORD ZONESYNC_SCHEMA_PASSWORD ZONESYNC_META_PASSWORD ZONESYNC_ADMIN_PASSWORD; do
  if [ -z "${!var:-}" ]; then
    echo "20-zonesync-roles.sh: $var is empty: set it in docker/.env" >&2
    false
  fi
done

docker_process_sql --database=mysql < /docker-entrypoint-initdb.d/roles.sql.in

docker_process_sql --database=mysql <<SQL
SET SESSION sql_log_bin = 0;
ALTER USER 'zs_replicator'@'%' IDENTIFIED BY '${ZONESYNC_REPLICATOR_PASSWORD}' ACCOUNT UNLOCK;
ALTER USER 'zs_applier'@'%' IDENTIFIED BY '${ZONESYNC_APPLIER_PASSWORD}' ACCOUNT UNLOCK;
ALTER USER 'zs_app'@'%' IDENTIFIED BY '${ZONESYNC_APP_PASSWORD}' ACCOUNT UNLOCK;
ALTER USER 'zs_batch'@'%' IDENTIFIED BY '${ZONESYNC_BATCH_PASSWORD}' ACCOUNT UNLOCK;
ALTER USER 'zs_schema'@'%' IDENTIFIED BY '${ZONESYNC_SCHEMA_PASSWORD}' ACCOUNT UNLOCK;
ALTER USER 'zs_meta'@'%' IDENTIFIED BY '${ZONESYNC_META_PASSWORD}' ACCOUNT UNLOCK;
ALTER USER 'zs_admin'@'%' IDENTIFIED BY '${ZONESYNC_ADMIN_PASSWORD}' ACCOUNT UNLOCK;
SQL
