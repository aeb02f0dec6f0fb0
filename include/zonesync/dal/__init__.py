"""PiDAL: the write guard applications use instead of a raw connection.

    guard = Guard(MetaConfig.from_env(), zone="a", zone_db=ZoneDB(host, port, user, password, "app"))
    guard.start()
    with guard.transaction() as tx:
        tx.insert("orders", {"order_id": 1, "tenant_id": 7, "amount": 9.5})
        tx.update("orders", {"order_id": 1}, {"amount": 10})
        tx.delete("orders", {"order_id": 1})
    guard.close()

See docs/guard.md for the rule model, the table contract and the failure modes.
"""

from zonesync.dal.errors import (
    EntityWriteStopped,
    GuardError,
    GuardNotSynced,
    RowNotFoundHere,
    TableContractError,
    TransactionDeadlineExceeded,
    WriteRefused,
    WrongZone,
    ZoneReshardingBlocked,
    ZsidUndetermined,
)
from zonesync.dal.guard import Guard, ZoneDB

__all__ = [
    "EntityWriteStopped",
    "Guard",
    "GuardError",
    "GuardNotSynced",
    "RowNotFoundHere",
    "TableContractError",
    "TransactionDeadlineExceeded",
    "WriteRefused",
    "WrongZone",
    "ZoneDB",
    "ZoneReshardingBlocked",
    "ZsidUndetermined",
]
