"""Why the guard refused a write. Every refusal rolls the transaction back."""

from __future__ import annotations


class GuardError(RuntimeError):
    pass


class WriteRefused(GuardError):
    """Base of every refusal: the write did not happen and must not be retried blindly."""


class ZoneReshardingBlocked(WriteRefused):
    """The ZSID is BLOCK or RESHARDING: writes pause while it moves between zones."""

    def __init__(self, zsid: int, status: str, version: int):
        self.zsid, self.status, self.version = zsid, status, version
        super().__init__(f"Zone resharding block error: ZSID {zsid} is {status} (rules v{version})")


class WrongZone(WriteRefused):
    """Another zone owns the ZSID (or the entity): route the write there."""

    def __init__(self, owner: str, zsid: int | None, version: int, what: str = ""):
        self.owner, self.zsid, self.version = owner, zsid, version
        super().__init__(f"{what or f'ZSID {zsid}'} is owned by zone {owner}, not this one (rules v{version})")


class EntityWriteStopped(WriteRefused):
    def __init__(self, le_type: str, le_id: str, version: int):
        self.le_type, self.le_id, self.version = le_type, le_id, version
        super().__init__(f"writes to {le_type} {le_id} are stopped (version {version}): it is being migrated")


class ZsidUndetermined(WriteRefused):
    """The write's ZSID could not be determined, so it is refused, never let through."""


class GuardNotSynced(WriteRefused):
    """Fail closed: this instance could not sync with the meta store within its lease."""


class TransactionDeadlineExceeded(WriteRefused):
    def __init__(self, elapsed_ms: float, deadline_ms: int, version: int):
        super().__init__(
            f"transaction ran {elapsed_ms:.0f} ms, over the {deadline_ms} ms deadline of rules v{version}: "
            "refused at commit"
        )


class TableContractError(GuardError):
    """The table does not meet the replicated-table contract (docs/table-contract.md)."""
