"""The applier's loop: rounds read from the topics, continuity per partition, rounds handed
to the workers, partition faults and lag. Uses batch/ (one round's share as one target
transaction) and bookkeeping/; nothing below imports it."""
