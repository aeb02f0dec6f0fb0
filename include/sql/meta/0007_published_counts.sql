-- zonesync meta store, schema version 7: how many events each partition's chain holds.
--
-- With each checkpoint, per partition, the number of events published to it since its
-- chain began (seed S002-10, 同时检查从集群与主集群的 binlog 条数是否相等). Like the
-- partition LSNs it is a pure function of the binlog position, so a rewind recounts the
-- same numbers. `zonesync reconcile` compares it with what each target committed. NULL:
-- the chain began before counting existed, and cannot be reconciled.
ALTER TABLE replicator_checkpoints ADD COLUMN IF NOT EXISTS partition_counts LONGTEXT NULL;
