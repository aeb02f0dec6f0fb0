"""`zonesync demo | dev up | down | status | broker | topic`: the local environment."""

from __future__ import annotations

from pathlib import Path

from zonesync import config


def _cfg():
    return config.load()


def cmd_dev_up(args) -> int:
    from zonesync.dev import env

    cfg = _cfg()
    env.up(cfg)
    if args.sample:
        env.load_sample_schema(cfg)
        print("sample schema loaded into every zone (database zonesync_app)")
    print(env.format_status(env.status(cfg)))
    _print_ui(cfg)
    return 0


def _print_ui(cfg) -> None:
    from zonesync.dev import airflow_env

    if not cfg.with_airflow:
        return
    password = airflow_env.admin_password(cfg)
    print(
        f"\nAirflow UI: http://127.0.0.1:{cfg.airflow_port}  (login: {airflow_env.ADMIN_USER}, "
        f"password in {cfg.airflow_home / 'passwords.json'}{'' if password else ', written on first start'})"
    )


def cmd_dev_down(args) -> int:
    from zonesync.dev import env

    cfg = _cfg()
    stopped = env.down(cfg)
    print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    if args.wipe:
        env.wipe(cfg)
        print(f"removed {cfg.state_dir}")
    return 0


def cmd_dev_status(args) -> int:
    from zonesync.dev import env

    cfg = _cfg()
    rows = env.status(cfg)
    print(env.format_status(rows))
    return 0 if all(r.health == "healthy" for r in rows) else 1


def cmd_dev_broker(args) -> int:
    from zonesync.dev import broker

    broker.serve(Path(args.info_file), args.topics, args.partitions, args.brokers, args.control_port)
    return 0


def cmd_dev_topic(args) -> int:
    from zonesync.dev import broker

    broker.create_topic(_cfg().broker_file, args.topic, args.partitions)
    print(f"topic {args.topic}: {args.partitions} partitions")
    return 0


def cmd_dev_replica(args) -> int:
    """`zonesync dev replica ZONE [--port P]`: the zone's replica (dev/replica.py)."""
    from zonesync.dev import replica

    cfg = _cfg()
    if args.zone not in [z.name for z in cfg.zones]:
        print(f"zonesync dev replica: ZONE: {args.zone!r} is not a zone of ZONESYNC_ZONES")
        return 2
    try:
        inst = replica.start(cfg, args.zone, args.port)
    except (replica.ReplicaError, OSError, RuntimeError) as exc:
        print(f"zonesync dev replica: {exc}")
        return 1
    print(f"{inst.name} replicates zone {args.zone} on 127.0.0.1:{inst.port} (GTID {replica.gtid_pos(inst)})")
    print(f"  fail over to it: zonesync zones set-primary {args.zone} 127.0.0.1:{inst.port} (docs/failover.md)")
    return 0


def cmd_demo(args) -> int:
    from zonesync.dev import demo

    return demo.run(_cfg())


def register(sub) -> None:
    sub.add_parser("demo", help="bring everything up, run the main job, print where to look").set_defaults(
        func=cmd_demo
    )
    dev = sub.add_parser("dev", help="the local environment: zones, broker, Airflow")
    dev_sub = dev.add_subparsers(dest="dev_command", required=True, metavar="ACTION")
    up = dev_sub.add_parser("up", help="start (or heal) every component; harmless when already up")
    up.add_argument("--sample", action="store_true", help="load include/sql/sample_app.sql into every zone")
    up.set_defaults(func=cmd_dev_up)
    down = dev_sub.add_parser("down", help="stop every process the environment started")
    down.add_argument("--wipe", action="store_true", help="also delete the state dir (all zone data)")
    down.set_defaults(func=cmd_dev_down)
    dev_sub.add_parser("status", help="each component's address, pid and health").set_defaults(func=cmd_dev_status)
    rep = dev_sub.add_parser("replica", help="start a zone's replica (GTID, log_slave_updates): a failover target")
    rep.add_argument("zone")
    rep.add_argument("--port", type=int, help="its port (default: ZONESYNC_BASE_PORT + 30 + the zone's id)")
    rep.set_defaults(func=cmd_dev_replica)
    br = dev_sub.add_parser("broker", help="run the in-memory Kafka broker in the foreground")
    br.add_argument("--info-file", required=True, help="where to write bootstrap servers and the control port")
    br.add_argument("--partitions", type=int, default=32, help="partitions of the topics created at start")
    br.add_argument("--brokers", type=int, default=1, help="number of mock brokers")
    br.add_argument("--control-port", type=int, default=0, help="control port (0: any free port)")
    br.add_argument("topics", nargs="*", help="topics to create at start")
    br.set_defaults(func=cmd_dev_broker)
    topic = dev_sub.add_parser("topic", help="create a topic on the running dev broker")
    topic.add_argument("topic")
    topic.add_argument("--partitions", type=int, default=32)
    topic.set_defaults(func=cmd_dev_topic)
