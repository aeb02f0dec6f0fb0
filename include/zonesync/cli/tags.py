"""`zonesync tags check | apply | show | diff`: tag rules (docs/tagging.md) in the meta store;
`zonesync tags compact --zone Z`: a zone's tag store folded to one segment per entity;
`zonesync tags wait --zone Z`: until Z's tagger has tagged every zone's writes up to now."""

from __future__ import annotations

import json
import sys

import yaml

from zonesync.cli import common


def _summary(tags) -> str:
    repos = ", ".join(f"{repo} ({len(ps)})" for repo, ps in sorted(tags.kv_repos.items())) or "none"
    forward = sum(1 for r in tags.mysql if r.forward_table)
    return (f"{len(tags.mysql)} MySQL table(s) ({forward} by forward rule), {len(tags.kv)} KV pattern(s) "
            f"in repos {repos}; no two patterns of a repo match one key")  # fmt: skip


def cmd_tags_check(args) -> int:
    from zonesync.tagging.rules import load_file

    tags = load_file(args.file)
    print(f"{args.file}: OK: {_summary(tags)}")
    return 0


def cmd_tags_apply(args) -> int:
    from zonesync.meta.store import MetaStore
    from zonesync.tagging.rules import load_file

    tags = load_file(args.file)
    version = MetaStore(common.meta()).publish_tags(tags, args.reason)
    print(f"published tag rules version {version}: {_summary(tags)}")
    return 0


def cmd_tags_show(args) -> int:
    from zonesync.meta.store import MetaStore

    found = MetaStore(common.meta()).tags_at(args.version)
    if found is None:
        print("no tag rules published yet: `zonesync tags apply FILE --reason ...`")
        return 1
    version, tags = found
    print(f"# tag rules version {version}")
    print(json.dumps(tags.to_doc(), indent=2) if args.json else yaml.safe_dump(tags.to_doc(), sort_keys=False).rstrip())
    return 0


def diff(old, new) -> list[str]:
    """What a tag rules change adds, removes or changes: one line each."""

    def keyed(tags):
        doc = tags.to_doc()
        return {f"mysql {r['repo']}.{r['table']}": r for r in doc["mysql"]} | {
            f"kv {r['repo']} {r['pattern']}": r for r in doc["kv"]
        }

    a, b = keyed(old), keyed(new)
    lines = [f"+ {k}" for k in sorted(b.keys() - a.keys())] + [f"- {k}" for k in sorted(a.keys() - b.keys())]
    return lines + [f"~ {k}: {json.dumps(a[k], sort_keys=True)} -> {json.dumps(b[k], sort_keys=True)}"
                    for k in sorted(a.keys() & b.keys()) if a[k] != b[k]]  # fmt: skip


def cmd_tags_diff(args) -> int:
    from zonesync.meta.store import MetaStore
    from zonesync.tagging.rules import TagRules, load_file

    new = load_file(args.file)
    found = MetaStore(common.meta()).tags_at()
    lines = diff(found[1] if found else TagRules(), new)
    print("\n".join(lines) if lines else f"{args.file} holds the tag rules in force (version {found[0]})")
    return 0


def cmd_tags_compact(args) -> int:
    from zonesync.runtime.endpoints import zone_endpoint
    from zonesync.tagging.tag_store import TagStore, load_connection

    ep = zone_endpoint(args.zone)
    store = TagStore(ep.connect, ep.database)
    before = store.segment_count()
    conn = load_connection(ep.host, ep.port, ep.user, ep.password, ep.database)
    try:
        groups = store.compact_all(conn)
    finally:
        conn.close()
    print(f"zone {args.zone}: {groups} entity table(s) compacted, {before} -> {store.segment_count()} segment(s)")
    return 0


def cmd_tags_wait(args) -> int:
    from zonesync.capture.binlog import binlog_end
    from zonesync.tagging.freshness import wait_tagged
    from zonesync.tagging.tag_store import TagStore

    if not 0 < args.timeout <= 86_400:
        return common.fail(f"--timeout {args.timeout:g}: give 0 < seconds <= 86400")
    positions = {}
    for z in common.zone_names():
        conn = common.zone_conn(z)
        try:
            positions[z] = binlog_end(conn)
        finally:
            conn.close()
    now = ", ".join(f"{z} {f}:{p}" for z, (f, p) in sorted(positions.items()))
    ep = common.zone_endpoint(args.zone)
    left = wait_tagged(common.meta(), TagStore(ep.connect, ep.database), positions, args.timeout)
    if left:
        hint = f"is its tagger running (`zonesync tag --zone {args.zone}`), and the replicators?"
        print(f"zone {args.zone}: not tagged up to {', '.join(left)} after {args.timeout:g} s (binlogs at {now}); "
              f"{hint}", file=sys.stderr)  # fmt: skip
        return 1
    print(f"zone {args.zone}: tagged up to every zone's binlog as of the call ({now})")
    return 0


def register(sub) -> None:
    tags = sub.add_parser("tags", help="tag rules: which rows and KV keys belong to which entity")
    tsub = tags.add_subparsers(dest="tags_command", required=True, metavar="ACTION")
    chk = tsub.add_parser("check", help="validate a tag rules file (patterns, forward rules, overlaps)")
    chk.add_argument("file")
    chk.set_defaults(func=cmd_tags_check)
    app = tsub.add_parser("apply", help="check and publish a tag rules file as a new version")
    app.add_argument("file")
    app.add_argument("--reason", required=True, help="why: recorded in the version and the audit log")
    app.set_defaults(func=cmd_tags_apply)
    show = tsub.add_parser("show", help="print the tag rules in force (or of a version)")
    show.add_argument("--version", type=int)
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=cmd_tags_show)
    dif = tsub.add_parser("diff", help="what a tag rules file changes against the rules in force")
    dif.add_argument("file")
    dif.set_defaults(func=cmd_tags_diff)
    cmp = tsub.add_parser("compact", help="fold a zone's tag store to one segment per entity and table")
    cmp.add_argument("--zone", required=True)
    cmp.set_defaults(func=cmd_tags_compact)
    wt = tsub.add_parser("wait", help="wait until a zone's tagger has tagged every zone's writes up to now (S004-06)")
    wt.add_argument("--zone", required=True)
    wt.add_argument("--timeout", type=float, default=60.0, help="seconds (default 60)")
    wt.set_defaults(func=cmd_tags_wait)
