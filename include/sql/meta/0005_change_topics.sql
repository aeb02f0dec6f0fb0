-- zonesync meta store, schema version 5: the partition count of each zone's change topic.
--
-- A row's partition is crc32(table, pk) mod the count, and every partition carries its
-- own LSN chain: with another count the same key lands in another partition, so per-key
-- order and the chains would break silently. The first replicator of a zone records the
-- count it publishes with; replicators and appliers with another count refuse to start
-- (include/zonesync/meta/topics.py).
CREATE TABLE IF NOT EXISTS change_topics (
    zone        VARCHAR(16)  NOT NULL PRIMARY KEY,
    partitions  INT          NOT NULL,
    created_at  TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB;
