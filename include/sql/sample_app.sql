-- A small sample application schema, loaded into every zone by `make demo`
-- (`zonesync dev up --sample`). Idempotent: safe to load again.
-- _zs_origin / _zs_version are the bookkeeping columns of the replicated-table
-- contract (docs/table-contract.md): the zone that wrote the row and its version.
CREATE DATABASE IF NOT EXISTS zonesync_app;

CREATE TABLE IF NOT EXISTS zonesync_app.tenants (
    tenant_id   BIGINT       NOT NULL PRIMARY KEY,
    name        VARCHAR(100) NOT NULL,
    created_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    _zs_origin  SMALLINT     NOT NULL DEFAULT 0,
    _zs_version BIGINT       NOT NULL DEFAULT 0
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS zonesync_app.orders (
    order_id    BIGINT        NOT NULL PRIMARY KEY,
    tenant_id   BIGINT        NOT NULL,
    amount      DECIMAL(12,2) NOT NULL,
    status      VARCHAR(16)   NOT NULL DEFAULT 'new',
    updated_at  TIMESTAMP(6)  NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6),
    _zs_origin  SMALLINT      NOT NULL DEFAULT 0,
    _zs_version BIGINT        NOT NULL DEFAULT 0,
    KEY idx_orders_tenant (tenant_id)
) ENGINE=InnoDB;
