"""S002-12 (LOB 复制): rows with large BLOB, LONGTEXT and JSON values, inserted and updated
through zone a's guard, arrive in b and c byte for byte: every byte value of a BLOB
(0x00, invalid UTF-8), multi-byte UTF-8 and emoji in LONGTEXT, JSON documents (nested,
unicode, numbers) compared as text and as values, from a few hundred KB up to events a
bit under the broker's message limit (an event over it: test_event_too_large.py).

The table is the test's own (created without binlogging in every zone, registered in the
rules as the table contract requires) and dropped at the end.
"""

from __future__ import annotations

import hashlib
import json
import random
import time

import pytest

from tests.support.replication import ZONES, alerts
from tests.support.rules import BASE, rules_doc
from tests.support.topics import topic_messages
from zonesync.events import decode_message, encode_message
from zonesync.meta.store import MetaStore

pytestmark = pytest.mark.integration

TABLE = "lob_docs"
# the producer's message.max.bytes (librdkafka's default; the broker's is the same)
MESSAGE_LIMIT = 1_000_000

DDL = f"""CREATE TABLE zonesync_app.{TABLE} (
    doc_id      BIGINT   NOT NULL PRIMARY KEY,
    tenant_id   BIGINT   NOT NULL,
    payload     LONGBLOB NULL,
    body        LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    doc         JSON     NULL,
    _zs_origin  SMALLINT NOT NULL DEFAULT 0,
    _zs_version BIGINT   NOT NULL DEFAULT 0
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""

# byte sequences that are not UTF-8 (overlong, lone continuation, surrogate, truncated, 0xFE/0xFF)
NOT_UTF8 = b"\xc3\x28\xa0\xa1\xe2\x28\xa1\xe2\x82\x28\xf0\x28\x8c\xbc\xf0\x90\x28\xbc\xc0\xaf\xed\xa0\x80\xfe\xff\xf8"
# text pieces: 2-, 3- and 4-byte UTF-8, emoji with modifiers and joiners, combining marks,
# and what SQL, LOAD DATA and JSON escape (quotes, backslash, tab, newline, CR, NUL)
PIECES = [
    "plain ascii ",
    "Grüße aus Köln ",
    "中文字符与日本語テキスト ",
    "한국어 ",
    "😀🚀🎉 ",
    "👍🏽👩‍👩‍👧‍👦 ",
    "🧑‍💻 ",
    "e\u0301 n\u0303 ",
    "𝄞𐍈 ",
    'it\'s "quoted" \\back\\slash\\ ',
    "tab\there\nnew line\r\n",
    "nul\x00char ",
    "%_ LIKE wildcards ",
]


def _blob(rnd: random.Random, size: int) -> bytes:
    head = bytes(range(256)) + NOT_UTF8 + b"\x00" * 16 + b"\\'\"\t\n\r\x1a"
    body = rnd.randbytes(size - len(head) - 8)
    return head + body + b"\x00\xff\x00\xfe\x00 \x00\x00"  # trailing NULs and a space kept as they are


def _text(rnd: random.Random, size: int) -> str:
    """About `size` bytes of UTF-8, ending in an emoji and trailing spaces."""
    parts, total = [], 0
    while total < size:
        piece = rnd.choice(PIECES)
        parts.append(piece)
        total += len(piece.encode())
    return "".join(parts) + "end 🏁  "


def _plain_text(rnd: random.Random, size: int) -> str:
    """`size` bytes of UTF-8 with no character JSON escapes (so the event stays as large as
    the value): ASCII letters with 2-, 3- and 4-byte characters mixed in."""
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJ0123456789.,;:!?-"
    parts, total = [], 0
    while total < size:
        word = "".join(rnd.choice(alphabet) for _ in range(40))
        extra = rnd.choice(["ü", "中", "😀", "🚀", "ñ", "€"])
        parts.append(word + extra)
        total += len(word) + len(extra.encode())
    return "".join(parts)


def _document(rnd: random.Random, items: int, salt: str) -> dict:
    nested: dict = {"leaf": [None, True, False, "блин 🥞", -0.0001, 2**63 - 1]}
    for depth in range(20):  # MariaDB's JSON functions stop at a depth of 32
        nested = {f"level{depth}": nested, "n": depth, "ключ": "значение"}
    return {
        "salt": salt,
        "numbers": [
            0,
            -1,
            1.5,
            -0.25,
            1e-7,
            6.02214076e23,
            2**53 + 1,
            -(2**63),
            12345678901234567890,
            3.141592653589793,
        ],
        "unicode": {"emoji 😀": "🚀", "中文": "字符", "escapes": 'quote " backslash \\ tab \t nl \n ctl \u0001'},
        "nested": nested,
        "items": [
            {
                "id": i,
                "name": _text(rnd, 40),
                "price": round(rnd.uniform(0, 10000), 2),
                "qty": rnd.randint(-1000, 10**12),
                "tags": [rnd.choice(["红", "green", "🔵", "ß"]) for _ in range(3)],
                "ok": rnd.random() < 0.5,
                "none": None,
            }
            for i in range(items)
        ],
    }


def _json(doc: dict) -> str:
    return json.dumps(doc, ensure_ascii=False)


def _md5(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    return hashlib.md5(value.encode() if isinstance(value, str) else value).hexdigest()


def _digests(inst) -> dict[int, tuple]:
    """doc_id -> server-side lengths and MD5s of every LOB, origin and version."""
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute(
            f"SELECT doc_id, tenant_id, LENGTH(payload), MD5(payload), CHAR_LENGTH(body), LENGTH(body), MD5(body), "
            f"LENGTH(doc), MD5(doc), _zs_origin, _zs_version FROM {TABLE} ORDER BY doc_id"
        )
        return {r[0]: tuple(r[1:]) for r in cur.fetchall()}


def _rows(inst) -> dict[int, tuple]:
    """doc_id -> (payload, body, doc) as fetched."""
    with inst.connect("zonesync_app").cursor() as cur:
        cur.execute(f"SELECT doc_id, payload, body, doc FROM {TABLE} ORDER BY doc_id")
        return {r[0]: (r[1], r[2], r[3]) for r in cur.fetchall()}


@pytest.fixture
def lob_table(cluster, zones, meta):
    for z in ZONES:
        with zones[z].connect("zonesync_app").cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
            cur.execute(DDL)
    tables = {**BASE["tables"], TABLE: {"column": "tenant_id", "function": "modulo", "buckets": 1024}}
    MetaStore(meta).publish_rules(rules_doc(tables=tables), f"test: {TABLE} is replicated")
    yield
    for z in ZONES:
        with zones[z].connect("zonesync_app").cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"DROP TABLE IF EXISTS {TABLE}")


def _locks(inst) -> list[tuple]:
    with inst.connect().cursor() as cur:
        cur.execute("SELECT table_name, pk, reason FROM zonesync.row_locks")
        return list(cur.fetchall())


def _wait_copied(zones, timeout: float = 60.0) -> dict[int, tuple]:
    """Zone a's digests, once b and c have the same; fails at once on a locked row."""
    deadline = time.monotonic() + timeout
    while True:
        source = _digests(zones["a"])
        copies = {z: _digests(zones[z]) for z in ("b", "c")}
        if copies == {"b": source, "c": source}:
            return source
        locks = {z: _locks(zones[z]) for z in ("b", "c")}
        assert locks == {"b": [], "c": []}, f"rows were locked instead of replicated: {locks}"
        assert time.monotonic() < deadline, f"b and c did not converge to a: {source} != {copies}"
        time.sleep(0.2)


def _assert_identical(zones, want: dict[int, tuple]) -> None:
    """Zone a holds `want` (doc_id -> payload, body, doc) as written, and b and c hold
    exactly the same bytes, text and JSON."""
    assert _rows(zones["a"]) == want, "zone a stored the values as written"
    source = _wait_copied(zones)
    for doc_id, (payload, body, doc) in want.items():
        d = source[doc_id]
        assert (d[1], d[2]) == ((len(payload), _md5(payload)) if payload is not None else (None, None))
        assert (d[4], d[5]) == ((len(body.encode()), _md5(body)) if body is not None else (None, None))
        assert (d[6], d[7]) == ((len(doc.encode()), _md5(doc)) if doc is not None else (None, None))
    for z in ("b", "c"):
        fetched = _rows(zones[z])
        assert fetched.keys() == want.keys()
        for doc_id, (payload, body, doc) in want.items():
            got = fetched[doc_id]
            assert got[0] == payload, f"zone {z} doc {doc_id}: BLOB differs"
            assert got[1] == body, f"zone {z} doc {doc_id}: LONGTEXT differs"
            assert got[2] == doc, f"zone {z} doc {doc_id}: JSON text differs"
            if doc is not None:
                assert json.loads(got[2]) == json.loads(doc), f"zone {z} doc {doc_id}: JSON value differs"
        with zones[z].connect("zonesync_app").cursor() as cur:
            for doc_id, (payload, _, doc) in want.items():
                if payload is not None:
                    cur.execute(f"SELECT HEX(payload) FROM {TABLE} WHERE doc_id = %s", (doc_id,))
                    assert cur.fetchone()[0] == payload.hex().upper(), f"zone {z} doc {doc_id}: HEX of the BLOB"
                if doc is not None:
                    cur.execute(f"SELECT JSON_EQUALS(doc, %s) FROM {TABLE} WHERE doc_id = %s", (doc, doc_id))
                    assert cur.fetchone() == (1,), f"zone {z} doc {doc_id}: the server finds the JSON different"
            cur.execute("SELECT COUNT(*) FROM zonesync.apply_state WHERE status <> 'running'")
            assert cur.fetchone() == (0,), f"zone {z} halted a partition"


def test_large_blob_text_and_json_values_arrive_byte_identical(lob_table, cluster, guard_env, zones, meta):
    rnd = random.Random(12)
    docs = {3: _document(rnd, 1600, "three"), 4: _document(rnd, 450, "four")}
    expected: dict[int, dict] = {
        # a few hundred KB of each kind, one LOB per row
        1: {"tenant_id": 11, "payload": _blob(rnd, 300_000), "body": "x", "doc": "{}"},
        2: {"tenant_id": 12, "payload": None, "body": _text(rnd, 350_000), "doc": None},
        3: {"tenant_id": 13, "payload": None, "body": None, "doc": _json(docs[3])},
        # all three in one row
        4: {"tenant_id": 14, "payload": _blob(rnd, 100_000), "body": _text(rnd, 150_000), "doc": _json(docs[4])},
        # a bit under the message limit: base64 of 690 KB, and 940 KB of text
        5: {"tenant_id": 15, "payload": _blob(rnd, 690_000), "body": None, "doc": None},
        6: {"tenant_id": 16, "payload": None, "body": _plain_text(rnd, 940_000), "doc": None},
        # one byte, one character, grown later (an empty BLOB: the test below)
        7: {"tenant_id": 17, "payload": b"\x00", "body": "é", "doc": "[]"},
    }
    assert len(expected[3]["doc"].encode()) > 250_000, "a JSON document of a few hundred KB"
    ga = guard_env("a")
    for doc_id, row in expected.items():
        with ga.transaction() as tx:
            tx.insert(TABLE, {"doc_id": doc_id, **row})
    # the inserts are in b and c first, so each update below meets its old row there and
    # lands only if the event's old image is that row, byte for byte
    _assert_identical(zones, {d: (r["payload"], r["body"], r["doc"]) for d, r in expected.items()})

    docs[3]["items"][0]["price"] = -1.25
    docs[3]["nested"]["new key 🆕"] = {"deep": [1, [2, [3, {"x": None}]]]}
    updates = {
        1: {"payload": _blob(rnd, 300_000)[::-1]},  # a different 300 KB: old and new images, 800 KB in base64
        2: {"body": _text(rnd, 330_000)},
        3: {"doc": _json(docs[3])},
        4: {"payload": None, "body": "shrunk to one emoji 🫠"},
        7: {"payload": _blob(rnd, 250_000), "body": _text(rnd, 200_000), "doc": _json(_document(rnd, 300, "seven"))},
    }
    for doc_id, changes in updates.items():
        with ga.transaction() as tx:
            assert tx.update(TABLE, {"doc_id": doc_id}, changes) == 1
        expected[doc_id].update(changes)
    _assert_identical(zones, {d: (r["payload"], r["body"], r["doc"]) for d, r in expected.items()})

    assert alerts(meta, "a", "event_too_large") == []
    published = {}  # lsn -> (the event alone as a message, in bytes, op, doc_id)
    for _partition, message in topic_messages(cluster, "a"):
        for event in decode_message(message):
            if event.table == TABLE:
                published[event.lsn] = (len(encode_message([event])), event.op, event.pk["doc_id"])
    assert sorted((op, pk) for _, op, pk in published.values()) == sorted(
        [("insert", d) for d in expected] + [("update", d) for d in updates]
    ), "each insert and update was published"
    largest = max(published.values())
    assert 850_000 < largest[0] < MESSAGE_LIMIT, f"the largest event is a bit under the message limit: {largest}"


def test_an_empty_blob_updated_in_a_reaches_b_and_c(lob_table, cluster, guard_env, zones, meta):
    """An empty BLOB is b'' in the event, as the target reads it back: the update's old image
    matches b's and c's row (it used to be '' there, and the row locked in b and c)."""
    ga = guard_env("a")
    with ga.transaction() as tx:
        tx.insert(TABLE, {"doc_id": 8, "tenant_id": 18, "payload": b"", "body": "", "doc": None})
    _assert_identical(zones, {8: (b"", "", None)})  # empty, not NULL
    with ga.transaction() as tx:
        assert tx.update(TABLE, {"doc_id": 8}, {"payload": b"\x00grown\xff"}) == 1
    _assert_identical(zones, {8: (b"\x00grown\xff", "", None)})
