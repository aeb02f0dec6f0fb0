"""Operator tools over what the applier left: manual data locks and their resolution
(lock_commands), wait_applied / halt / resume (progress), count reconciliation (reconcile)."""
