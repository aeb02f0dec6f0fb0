"""One type for "a zone's KV store": the zone's Redis and the logical database each KV
repo lives in. The KV guard (dal/kv.py), the KV tagger (tagging/kv_tagger.py), the CLI
and the demo all connect through `KvEndpoint.connect(repo)`.

    ZONESYNC_KV_<ZONE>_URL   redis://[:password@]host:port   (the zone's Redis)
    ZONESYNC_KV_REPOS        sessions=0,chat_cache=1         (repo -> logical database)

Without ZONESYNC_KV_<ZONE>_URL, only with the dev environment selected, the zone's
private redis-server (dev/redis.py); without ZONESYNC_KV_REPOS there, the sample's repos.
A password never shows in a repr or a log line.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass, field

from zonesync import config
from zonesync.sql_names import is_ident

DEV_REPOS = "sessions=0,chat_cache=1"  # the sample's repos (examples/tags.yaml)
TIMEOUT_S = 5.0


@dataclass(frozen=True)
class KvEndpoint:
    zone: str
    host: str
    port: int
    repos: tuple[tuple[str, int], ...]  # (repo, logical database)
    password: str = field(default="", repr=False)

    def db(self, repo: str) -> int:
        for name, db in self.repos:
            if name == repo:
                return db
        known = ", ".join(n for n, _ in self.repos) or "none"
        raise config.ConfigError(f"repo {repo!r} is not a KV repo of zone {self.zone} (repos: {known}): add it to "
                                 "ZONESYNC_KV_REPOS, e.g. ZONESYNC_KV_REPOS=sessions=0,chat_cache=1")  # fmt: skip

    def connect(self, repo: str):
        """A redis-py client on the repo's logical database."""
        import redis

        return redis.Redis(host=self.host, port=self.port, db=self.db(repo), password=self.password or None,
                           socket_timeout=TIMEOUT_S, socket_connect_timeout=TIMEOUT_S)  # fmt: skip


def parse_repos(text: str, setting: str = "ZONESYNC_KV_REPOS") -> tuple[tuple[str, int], ...]:
    """`sessions=0,chat_cache=1` -> ((sessions, 0), (chat_cache, 1)), or ConfigError."""
    out: list[tuple[str, int]] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, sep, db = part.partition("=")
        if not sep or not is_ident(name.strip()) or not db.strip().isdigit() or not 0 <= int(db) <= 15:
            raise config.ConfigError(f"{setting}: {part!r} is not repo=database: write e.g. sessions=0,chat_cache=1 "
                                     "(a plain name, a logical database 0-15)")  # fmt: skip
        out.append((name.strip(), int(db)))
    names, dbs = [n for n, _ in out], [d for _, d in out]
    if len(set(names)) != len(names) or len(set(dbs)) != len(dbs):
        raise config.ConfigError(f"{setting}: a repo or a database appears twice in {text!r}: one database per repo")
    return tuple(out)


def kv_endpoint(zone: str, env: dict | None = None) -> KvEndpoint:
    """Zone `zone`'s KV store (see the module's text); a bad or missing setting is a
    ConfigError naming the variable."""
    env = os.environ if env is None else env
    z = config.load(env).zone(zone)
    variable = f"ZONESYNC_KV_{zone.upper()}_URL"
    url, repos_text = env.get(variable), env.get("ZONESYNC_KV_REPOS")
    if not url:
        config.require_dev(variable, f"zone {zone}'s KV store", env, "redis://[:password@]host:port")
    if not repos_text:
        config.require_dev("ZONESYNC_KV_REPOS", "the KV repos", env, "repo=database,... (e.g. sessions=0)")
    repos = parse_repos(repos_text or DEV_REPOS)
    if not url:
        return KvEndpoint(zone, "127.0.0.1", z.kv_port, repos)
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme != "redis" or not parsed.hostname or parsed.path not in ("", "/"):
        raise config.ConfigError(f"{variable} must look like redis://[:password@]host:port (repos choose their "
                                 "database: ZONESYNC_KV_REPOS)")  # fmt: skip
    return KvEndpoint(zone, parsed.hostname, parsed.port or 6379, repos, urllib.parse.unquote(parsed.password or ""))
