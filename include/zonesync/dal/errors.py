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


class KeyUntagged(WriteRefused):
    """A KV key no registered pattern of its repo matches: its entity is unknown, so the key
    could neither be judged nor found by a migration. Register its pattern first."""


class KeyAmbiguous(WriteRefused):
    """A KV key that matches two patterns of its repo (seed 004 S004-08): never written
    under one of them at random; reported (alert `kv_ambiguous`)."""

    def __init__(self, repo: str, key: str, patterns: list[str], version: int):
        self.repo, self.key, self.patterns = repo, key, sorted(set(patterns))
        super().__init__(f"key {key!r} of repo {repo} matches {len(self.patterns)} pattern(s) {len(patterns)} ways "
                         f"({', '.join(self.patterns)}) in tag rules v{version}: not written; add a constraint "
                         "(where:) that tells them apart")  # fmt: skip


class GuardNotSynced(WriteRefused):
    """Fail closed: this instance could not sync with the meta store within its lease."""


class TransactionDeadlineExceeded(WriteRefused):
    def __init__(self, elapsed_ms: float, deadline_ms: int, version: int):
        super().__init__(
            f"transaction ran {elapsed_ms:.0f} ms, over the {deadline_ms} ms deadline of rules v{version}: "
            "refused at commit"
        )


class RowNotFoundHere(WriteRefused):
    """update/delete found no row, and its key alone does not decide the ZSID (or entity):
    the row may live in a zone that owns it and not have replicated here yet, so "no such
    row" (0) would be a guess. Refused instead; the call wrote nothing."""

    def __init__(self, what: str, table: str, key: dict, zone: str, missing: list[str], zsid_column: str, version: int):
        self.table, self.key, self.zone, self.missing, self.version = table, dict(key), zone, missing, version
        where = ", ".join(f"{c}={v!r}" for c, v in key.items())
        columns = " and ".join(f"the {'ZSID' if c == zsid_column else 'entity'} column {c}" for c in missing)
        super().__init__(
            f"{what} {table} {where}: no such row in zone {zone}, but the key does not decide its ZSID, so the "
            f"row may live in another zone that owns it (not replicated here yet); refused rather than answering "
            f"0 - write in the owner zone, or include {columns} in the primary key so the guard can route it "
            f"(rules v{version})"
        )


class TableContractError(GuardError):
    """The table does not meet the replicated-table contract (docs/table-contract.md)."""
