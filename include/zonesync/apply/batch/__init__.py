"""One batch as one target transaction: merge, decide, read the target, plan and send the
writes (new rows as LOAD DATA), the serial retry of unique-key conflicts. Uses
bookkeeping/ (positions, tombstones, row locks); knows nothing of Kafka or the loop."""
