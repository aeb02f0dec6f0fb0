-- zonesync meta store, schema version 9: the epoch of each zone's change topic.
--
-- `zonesync topics repartition` (include/zonesync/repartition.py, seed S002-08) changes
-- the partition count only once every zone has applied every other zone's events up to
-- its last checkpoint; the chains then restart at that position, and the epoch and the
-- time of the change are recorded here with the new count.
ALTER TABLE change_topics ADD COLUMN IF NOT EXISTS epoch INT NOT NULL DEFAULT 0;
ALTER TABLE change_topics ADD COLUMN IF NOT EXISTS repartitioned_at TIMESTAMP(6) NULL;
