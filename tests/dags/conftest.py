"""The DAG tests use the integration tests' zones, replication cluster and guards."""

from tests.integration.conftest import cluster, guard_env  # noqa: F401
