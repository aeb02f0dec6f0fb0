"""zonesync's own tables in every zone: apply_state (positions, claims, halts), tombstones
and row_locks (data locks): the statements that keep them. Imports nothing else of apply/
but errors.py."""
