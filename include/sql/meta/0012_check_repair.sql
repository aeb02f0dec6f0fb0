-- zonesync meta store, schema version 12: a check's repair (docs/consistency-check.md).
--
-- What repair did with each difference: inserted, updated or deleted (the zones that
-- had it wrong now hold the owner's row), or why it left the row alone. NULL: not
-- repaired (repair off, or not reached yet: a retried step repairs those).
ALTER TABLE check_diffs ADD COLUMN IF NOT EXISTS repair VARCHAR(250) NULL;
