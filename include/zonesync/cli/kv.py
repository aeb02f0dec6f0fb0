"""`zonesync kv set | get | del`: a zone's KV repos through the KV guard (docs/kv.md):
a write is refused, in one line, unless the key's pattern names an entity the zone owns
and may write; a written key is logged for the zone's KV tagger in the same atomic script."""

from __future__ import annotations

from zonesync.cli import common


def _kv_guard(zone: str):
    from zonesync.dal import Guard
    from zonesync.dal.kv import KvGuard
    from zonesync.runtime.kv_endpoint import kv_endpoint

    kv = kv_endpoint(zone)  # a bad setting fails before a guard registers
    guard = Guard(common.meta(), zone, common.zone_endpoint(zone)).start()
    return KvGuard(guard, kv)


def _write(args, action) -> int:
    from zonesync.dal.errors import WriteRefused

    kv = _kv_guard(args.zone)
    try:
        return action(kv)
    except WriteRefused as exc:
        return common.fail(f"refused: {exc}")
    finally:
        kv.close()
        kv.guard.close()


def cmd_kv_set(args) -> int:
    def action(kv) -> int:
        kv.set(args.repo, args.key, args.value, ttl_s=args.ttl)
        print(f"set {args.repo} {args.key!r} in zone {args.zone}")
        return 0

    if args.ttl is not None and args.ttl < 1:
        return common.fail(f"--ttl {args.ttl}: give whole seconds, at least 1 (or leave it out: no expiry)")
    return _write(args, action)


def cmd_kv_del(args) -> int:
    def action(kv) -> int:
        there = kv.delete(args.repo, args.key)
        print(f"deleted {args.repo} {args.key!r} in zone {args.zone}" + ("" if there else " (it was not there)"))
        return 0

    return _write(args, action)


def cmd_kv_get(args) -> int:
    from zonesync.runtime.kv_endpoint import kv_endpoint

    client = kv_endpoint(args.zone).connect(args.repo)
    try:
        value = client.get(args.key)
    finally:
        client.close()
    if value is None:
        print(f"(no key {args.key!r} in {args.repo} of zone {args.zone})")
        return 1
    print(value.decode(errors="backslashreplace"))
    return 0


def register(sub) -> None:
    kv = sub.add_parser("kv", help="a zone's KV repos through the KV guard (set, get, del)")
    ksub = kv.add_subparsers(dest="kv_command", required=True, metavar="ACTION")
    st = ksub.add_parser("set", help="write a key through the KV guard (tagged for the key's entity)")
    st.add_argument("repo")
    st.add_argument("key")
    st.add_argument("value")
    st.add_argument("--zone", required=True)
    st.add_argument("--ttl", type=int, help="expire after this many seconds")
    st.set_defaults(func=cmd_kv_set)
    dl = ksub.add_parser("del", help="delete a key through the KV guard")
    dl.add_argument("repo")
    dl.add_argument("key")
    dl.add_argument("--zone", required=True)
    dl.set_defaults(func=cmd_kv_del)
    gt = ksub.add_parser("get", help="read a key (reads are never refused)")
    gt.add_argument("repo")
    gt.add_argument("key")
    gt.add_argument("--zone", required=True)
    gt.set_defaults(func=cmd_kv_get)
