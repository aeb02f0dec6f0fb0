"""Online full copy (seed 000 在线全量同步, 001 replica learn, 002 online standby).

A copy fills a target zone's tables from a healthy source zone while every zone,
the target included, keeps writing. Two halves run at once (docs/copy.md):

- Incremental: the target's appliers replay every source's stream from start
  positions recorded before the first row is read (positions.py), applying the
  copied tables in copy mode (full-row upserts and deletes, version-guarded).
- Row copy: a Spark job reads key-range chunks of the source and merges them into
  the target with the applier's version rule and the tombstones (merge.py,
  spark_jobs/full_copy.py); a chunk's state commits with its rows (chunks.py).

Then catch up, verify, and join: the copied tables leave copy mode, and the
target is a normal member of the mesh. The steps are in steps.py; the run's
durable state in meta is store.py.
"""
