"""Capture: a zone's binlog -> ChangeEvents -> Kafka (the replicator)."""
