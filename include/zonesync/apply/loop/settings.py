"""How one applier runs: everything its operator can tune, in one frozen value.

The environment is read where the worker is built (runtime/workers.py: build_applier);
tests build one with the fields they change. The defaults are the production ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Group mode: a worker that stops heartbeating keeps its partitions for the session timeout
# (the seed's 保护期, S003-34: a hang, a GC pause or a network blip shorter than that moves
# nothing), then loses them to the live workers.
GROUP_SESSION_S = 6.0
# A transaction its applier leaves open and silent this long is rolled back by the server
# (MariaDB's idle_transaction_timeout): a worker frozen between its claim of a partition
# and its COMMIT (S003-37) would otherwise hold the partition's apply_state row and its
# rows' locks until it woke, and the partition's new owner would wait on them, lock wait
# timeout after lock wait timeout. A live applier's transaction is never silent for more
# than the time it takes to plan a round's writes (milliseconds); if it ever were, the
# server ends it and the round is retried from apply_state, as after any lost connection.
IDLE_TRANSACTION_S = 10.0
# An event whose version is further ahead of the applier's clock halts its partition:
# versions stay within clock skew of wall time (apply/loop/event_trust.py).
MAX_VERSION_AHEAD_S = 6 * 3600.0


@dataclass(frozen=True)
class ApplierSettings:
    workers: int = 4  # target connections; partition p is applied by worker p % workers
    max_batch: int = 2000  # events a round takes (about: a message is taken whole)
    small_round: int = 200  # a round of at most this many events is one transaction, on the loop's thread
    rounds_in_flight: int = 2  # rounds handed to the workers and not yet committed, at most
    resend_timeout: float = 3.0  # seconds between looks at an open resend request
    max_resends: int = 3  # served resends that left a gap open before its partition halts
    resend_wait: float = 30.0  # a served resend whose events have not arrived yet is waited for this long
    unique_conflict_timeout: float = 30.0  # a partition stopped at a unique conflict this long halts
    behind_timeout: float = 10.0  # a change waiting this long for its row's earlier versions locks the row
    txn_hold_timeout: float = 5.0  # a transaction's rows wait this long for the rest of it
    tombstone_horizon_s: float = 7 * 86400  # tombstones older than this are forgotten
    table_weights: dict[str, int] = field(default_factory=dict)  # Otter's 权重: lighter tables first
    group: bool = False  # share the zone's partitions with its other appliers (a Kafka consumer group)
    group_session_s: float = GROUP_SESSION_S  # group mode: how long a silent worker keeps its partitions
    idle_transaction_s: float = IDLE_TRANSACTION_S  # a silent open transaction is rolled back after this
    max_version_ahead_s: float = MAX_VERSION_AHEAD_S  # an event further ahead of the clock halts
    # only declared tables, only from the ZSID's owner of the time (owner_history.py); off
    # (ZONESYNC_APPLY_CHECK_OWNERS=0) only for rows written behind the guards, as some tests do
    check_owners: bool = True
    lag_warning_s: float = 60.0  # a partition this far behind raises lag_warning (lag_report.py)
    atomic_transactions: bool = False  # a source transaction's rows become visible together (atomic_rounds.py)
    drain_batch: int = 2000  # a held table's parked events applied per transaction, once resumed (held_tables.py)

    def __post_init__(self):
        object.__setattr__(self, "rounds_in_flight", max(1, self.rounds_in_flight))
        object.__setattr__(self, "table_weights", dict(self.table_weights or {}))
