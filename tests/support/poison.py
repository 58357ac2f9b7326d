"""Poison messages and what a source must do with them, on real Spark and the embedded broker.

`kinds()` is a catalogue of hostile messages — one kind per entry, for every format and
both sides — that `tests/test_poison.py` keeps as regression cases and
`bench/fault_poison.py` counts. `problems()` puts messages through real sources and says
what broke. A source survives its messages when:

* its snapshot SELECT succeeds, or fails with the text of one of its own errors;
* `FROM ONLY ERRORS` answers, and (ENVELOPE NONE) rows + errors + documented skips (no key
  and no value) account for every message;
* a twin with a dead-letter table (ingested continuously) ingests them all: its rows and
  dead letters cover every offset once (ENVELOPE NONE), its dead letters are distinct
  messages that are not rows (upsert).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import fastavro

import sluice
from sluice.kafka.embedded import produce
from sluice.kafka.encode import avro_datum as encoded
from sluice.kafka.encode import confluent_frame as wire  # tests call it poison.wire

# Every field type the Avro decoder builds a column for (TIME and UUID in AVRO_CLOCK).
AVRO_SCHEMA = {
    "type": "record",
    "name": "poison",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "n", "type": "long"},
        {"name": "s", "type": ["null", "string"]},
        {"name": "d", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}},
        {"name": "tags", "type": {"type": "array", "items": "long"}},
        {"name": "kind", "type": {"type": "enum", "name": "kind", "symbols": ["a", "b"]}},
        {"name": "attrs", "type": {"type": "map", "values": "double"}},
    ],
}
GOOD_DATUM = {
    "id": 1, "n": 2, "s": "x", "d": 19000, "ts": 1_700_000_000_000, "amount": b"\x04\xd2", "tags": [1, 2],
    "kind": "a", "attrs": {"k": 1.5},
}
AVRO_CLOCK = {
    "type": "record",
    "name": "clock",
    "fields": [
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}

# ENVELOPE DEBEZIUM: the row is `after`.
DEBEZIUM_KEY = {"type": "record", "name": "k", "fields": [{"name": "id", "type": "int"}]}
DEBEZIUM_VALUE = {
    "type": "record", "name": "envelope",
    "fields": [
        {"name": "before", "type": ["null", {"type": "record", "name": "row", "fields": [
            {"name": "id", "type": "int"}, {"name": "at", "type": {"type": "int", "logicalType": "date"}}]}]},
        {"name": "after", "type": ["null", "row"]},
        {"name": "op", "type": "string"},
    ],
}
# Writer schemas a registry may name whose datums cost more than their bytes: AVRO_SCHEMA
# with one field more (the reader skips it, reading every byte of it all the same).
RECURSIVE_SCHEMA = {**AVRO_SCHEMA, "fields": [*AVRO_SCHEMA["fields"], {"name": "next", "type": [
    "null", {"type": "record", "name": "node", "fields": [{"name": "next", "type": ["null", "node"]}]}]}]}
ZERO_WIDTH_SCHEMA = {**AVRO_SCHEMA, "fields": [*AVRO_SCHEMA["fields"], {"name": "marks", "type": {
    "type": "array", "items": {"type": "record", "name": "mark", "fields": []}}}]}
REGISTRY_SUBJECTS = {"poison-value": AVRO_SCHEMA, "recursive": RECURSIVE_SCHEMA, "zero-width": ZERO_WIDTH_SCHEMA}


def varint(n: int) -> bytes:
    """Avro's zig-zag varint of any 64-bit (or wider: overflowing) integer."""
    z = (n << 1) ^ (n >> 63) if -(2**63) <= n < 2**63 else n << 1
    z &= (1 << max(64, z.bit_length())) - 1
    out = bytearray()
    while z > 0x7F:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def avro_field(avro_type: Any, value: Any) -> bytes:
    """`value` written as `avro_type` (its logical type aside: values are given plain)."""
    if isinstance(avro_type, dict):
        avro_type = {k: v for k, v in avro_type.items() if k != "logicalType"}
    return encoded(fastavro.parse_schema(avro_type), value)


def debezium_after(row_id: int, at: int) -> bytes:
    """A Debezium value creating the row (`row_id`, `at`): no `before`, op "c"."""
    return b"\x00\x02" + varint(row_id) + varint(at) + avro_field("string", "c")


def avro_datum(**raw: bytes) -> bytes:
    """The good datum of AVRO_SCHEMA, with the fields named in `raw` replaced by those bytes."""
    return b"".join(
        raw[f["name"]] if f["name"] in raw else avro_field(f["type"], GOOD_DATUM[f["name"]])
        for f in AVRO_SCHEMA["fields"]
    )


def clock_datum(t: int = 3_600_000, u: bytes = b"12345678-1234-1234-1234-123456789012") -> bytes:
    """A datum of AVRO_CLOCK from plain values: a time of day in milliseconds, a UUID's text."""
    return varint(t) + varint(len(u)) + u


@dataclass(frozen=True)
class Poison:
    """One kind of hostile message: the messages (key, value) that carry it, and the source
    clauses that read them (`formats`: `FORMAT …` or `KEY FORMAT … VALUE FORMAT …`)."""

    name: str
    formats: str
    messages: tuple[tuple[bytes | None, bytes | None], ...]
    envelope: str = ""
    timestamp_ms: int | None = None

    @property
    def group(self) -> tuple[str, str]:
        return self.formats, self.envelope

    @property
    def stamped(self) -> list[tuple[bytes | None, bytes | None, int | None]]:
        return [(key, value, self.timestamp_ms) for key, value in self.messages]


AVRO_INLINE = "FORMAT AVRO USING SCHEMA '{schema}' (CONFLUENT WIRE FORMAT = false)"
AVRO_REGISTRY = "FORMAT AVRO USING CONFLUENT SCHEMA REGISTRY CONNECTION csr"
UPSERT_INLINE = "ENVELOPE UPSERT (VALUE DECODING ERRORS = INLINE)"


def avro_inline(schema: dict) -> str:
    return AVRO_INLINE.format(schema=json.dumps(schema).replace("'", "''"))


def kinds(registry_ids: dict[str, int]) -> list[Poison]:
    """The catalogue. `registry_ids`: the schema id of each of REGISTRY_SUBJECTS."""
    reader, recursive, zero = (registry_ids[s] for s in ("poison-value", "recursive", "zero-width"))
    inline, clock = avro_inline(AVRO_SCHEMA), avro_inline(AVRO_CLOCK)
    good = avro_datum()
    text_key = "KEY FORMAT TEXT VALUE FORMAT JSON"

    def value(name: str, formats: str, *payloads: bytes, envelope: str = "") -> Poison:
        return Poison(name, formats, tuple((None, p) for p in payloads), envelope)

    return [
        value("text: invalid UTF-8", "FORMAT TEXT", b"ok", b"\xff\xfe"),
        value("text: UTF-16 surrogate in UTF-8", "FORMAT TEXT", b"\xed\xa0\x80"),
        value("text: overlong encoding", "FORMAT TEXT", b"\xc0\x80"),
        value("text: NUL bytes", "FORMAT TEXT", b"a\x00b"),
        value("bytes: anything", "FORMAT BYTES", bytes(range(256))),
        value("json: nested 50,000 deep", "FORMAT JSON", b"[" * 50_000 + b"]" * 50_000, b'{"ok": 1}'),
        value("json: nested 128 deep", "FORMAT JSON", b"[" * 128 + b"]" * 128),
        value("json: repeated key", "FORMAT JSON", b'{"a": 1, "a": {"b": 2, "b": 3}}'),
        value("json: unpaired surrogate", "FORMAT JSON", b'["\\ud800"]', b'{"\\udc00": 1}'),
        value("json: number beyond a double", "FORMAT JSON", b"[1e400]", b"1" + b"0" * 400),
        value("json: number of 1,001 digits", "FORMAT JSON", b"1" * 1001),
        value("json: key of 50,001 characters", "FORMAT JSON", b'{"' + b"k" * 50_001 + b'": 1}'),
        value("json: invalid UTF-8", "FORMAT JSON", b'"\xff"'),
        value("json: truncated and trailing garbage", "FORMAT JSON", b'{"a": [1, 2', b"1 2", b"NaN"),
        value("csv: wrong column count", "FORMAT CSV WITH 2 COLUMNS", b"a,b", b"a", b"a,b,c", b"a,b\nc,d"),
        value("csv: field of 999,000 bytes, well-formed (a row)", "FORMAT CSV WITH 2 COLUMNS", b"x" * 999_000 + b",y"),
        value("csv: NUL, invalid UTF-8, open quote", "FORMAT CSV WITH 2 COLUMNS", b"a\x00,b", b"\xff,b", b'"a,b'),
        value("avro: int beyond 32 bits", inline, good, avro_datum(id=varint(999_999_999_999))),
        value("avro: varint beyond 64 bits", inline, avro_datum(n=b"\xff" * 20 + b"\x01")),
        value("avro: string length beyond the message", inline, avro_datum(s=b"\x02" + varint(2**40))),
        value("avro: negative string length", inline, avro_datum(s=b"\x02" + varint(-5))),
        value("avro: invalid UTF-8 string", inline, avro_datum(s=b"\x02\x04\xff\xfe")),
        value("avro: date out of range", inline, avro_datum(d=varint(2**31 - 1)), avro_datum(d=varint(-(2**31)))),
        value("avro: timestamp out of range", inline, avro_datum(ts=varint(2**62)), avro_datum(ts=varint(-(2**62)))),
        value("avro: time and uuid columns", clock,
              clock_datum(), clock_datum(u=b"12345678-1234-1234-1234-12345678ABCD")),
        value("avro: time out of range", clock, clock_datum(t=-1), clock_datum(t=86_400_000)),
        value("avro: not a uuid", clock, clock_datum(u=b"abc")),
        value("avro: decimal beyond its precision", inline, avro_datum(amount=varint(20) + b"\x7f" * 20)),
        value("avro: array block count of 2^62", inline, avro_datum(tags=varint(2**62) + b"\x02")),
        value("avro: union and enum index out of range", inline, avro_datum(s=varint(7)), avro_datum(kind=varint(9))),
        value("avro: what fastavro reads wrongly", inline, avro_datum(id=varint(2**64 + 5)),
              avro_datum(s=varint(-1)), avro_datum(s=varint(-2)), avro_datum(kind=varint(-1))),
        value("avro: truncated and trailing bytes", inline, good[:-3], good + b"\x00\x01"),
        value("avro registry: unknown schema id", AVRO_REGISTRY, wire(reader, good), wire(999, good)),
        value("avro registry: bad magic and short header", AVRO_REGISTRY, b"\x07" + good, b"\x00\x00"),
        value("avro registry: what fastavro reads wrongly", AVRO_REGISTRY,
              wire(reader, avro_datum(n=b"\xff" * 10 + b"\x01")), wire(reader, avro_datum(kind=varint(-1)))),
        value("avro registry: recursive writer 50,000 deep", AVRO_REGISTRY,
              wire(recursive, good + b"\x02" * 50_001 + b"\x00")),
        value("avro registry: 2^62 items of no bytes", AVRO_REGISTRY, wire(zero, good + varint(2**62) + b"\x00")),
        Poison("upsert: text key invalid UTF-8", text_key, ((b"\xff", b"{}"), (b"k", b"{}")), UPSERT_INLINE),
        Poison("upsert: json key nested 50,000 deep", "KEY FORMAT JSON VALUE FORMAT JSON",
               ((b"[" * 50_000, b"{}"), (b"1", b"[" * 50_000)), UPSERT_INLINE),
        Poison("upsert: avro key int beyond 32 bits", f"KEY {avro_inline({'type': 'int'})} VALUE FORMAT TEXT",
               ((varint(999_999_999_999), b"v"), (varint(5), b"w")), "ENVELOPE UPSERT"),
        Poison("upsert: avro key int of 2^64 + 5", f"KEY {avro_inline({'type': 'int'})} VALUE FORMAT TEXT",
               ((varint(2**64 + 5), b"v"), (varint(5), b"w")), "ENVELOPE UPSERT"),
        Poison("upsert: avro value poison, inline", f"KEY FORMAT TEXT VALUE {inline}",
               ((b"a", avro_datum(id=varint(2**40))), (b"b", good), (b"c", wire(1, good))), UPSERT_INLINE),
        Poison("debezium: key and after record out of range",
               f"KEY {avro_inline(DEBEZIUM_KEY)} VALUE {avro_inline(DEBEZIUM_VALUE)}",
               ((varint(1), debezium_after(1, 5)), (varint(2), debezium_after(2**40, 5)),
                (varint(3), debezium_after(3, 2**31 - 1)), (varint(2**40), debezium_after(4, 5))),
               "ENVELOPE DEBEZIUM"),
        Poison("kafka: timestamp past year 9999", "FORMAT TEXT", ((None, b"late"),), timestamp_ms=2**62),
    ]


def bounded(session: sluice.Session, sql: str, seconds: float) -> list:
    """`sql`'s rows; raises `TimeoutError` (its Spark jobs cancelled) past `seconds`."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["rows"] = session.execute(sql).rows
        except Exception as e:  # noqa: BLE001 - handed to the caller
            outcome["error"] = e

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        from sluice.spark.session import spark

        spark().sparkContext.cancelAllJobs()
        raise TimeoutError(f"{sql} ran longer than {seconds:g}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["rows"]


def _attempt(session: sluice.Session, sql: str, seconds: float) -> tuple[list | None, str | None]:
    try:
        return bounded(session, sql, seconds), None
    except Exception as e:  # noqa: BLE001 - any failure is the finding
        return None, f"{type(e).__name__}: {e}"


def problems(session: sluice.Session, kafka, registry, topic: str, formats: str, envelope: str,
             messages: list[tuple[bytes | None, bytes | None, int | None]], seconds: float = 120.0) -> list[str]:
    """What broke when `messages` (key, value, timestamp or None) went through a snapshot
    source and a continuously ingested twin reading `topic` (created here) with `formats` and
    `envelope`; [] when nothing did. `registry` (tests.support.registry.Registry) serves the
    catalogue's reader schema as the topic's."""
    prepare(session, kafka, registry, topic, formats, envelope, messages)
    return findings(session, topic, envelope, messages, seconds)


def prepare(session: sluice.Session, kafka, registry, topic: str, formats: str, envelope: str,
            messages: list[tuple[bytes | None, bytes | None, int | None]]) -> None:
    """`problems`' topic and its two sources, the ingested twin's stream started (by a
    materialized view over it) but not waited for."""
    registry.subjects[f"{topic}-value"] = registry.subjects["poison-value"]
    kafka.create_topic(topic, 1)
    for timestamp_ms, run in itertools.groupby(messages, key=lambda m: m[2]):
        produce(kafka.bootstrap, topic, [(k, v) for k, v, _ in run], partition=0, timestamp_ms=timestamp_ms)
    include = "INCLUDE OFFSET" if envelope != "" or formats.startswith("FORMAT") else "INCLUDE KEY, OFFSET"
    snapshot, ingested = f"{topic}_s", f"{topic}_i"
    for name, extra in ((snapshot, ""), (ingested, f"WITH (REDIRECT ERRORS = {ingested}_dlq)")):
        session.execute(
            f"CREATE SOURCE {name} FROM KAFKA CONNECTION kafka (TOPIC '{topic}') {formats} {include} {envelope} {extra}"
        )
    session.execute(f'CREATE MATERIALIZED VIEW {ingested}_offsets AS SELECT "offset" FROM {ingested}')


def findings(session: sluice.Session, topic: str, envelope: str,
             messages: list[tuple[bytes | None, bytes | None, int | None]], seconds: float) -> list[str]:
    """What broke in `topic`'s sources (`prepare` made them); [] when nothing did."""
    keyed = envelope != ""
    snapshot, ingested = f"{topic}_s", f"{topic}_i"
    errors, failure = _attempt(session, f"SELECT message FROM ONLY ERRORS {snapshot}", seconds)
    if failure is not None:
        return [f"FROM ONLY ERRORS failed: {failure}"]
    found = _snapshot_problems(session, snapshot, {m for (m,) in errors}, seconds)
    rows, failure = _attempt(session, f"SELECT count(*) FROM IGNORE ERRORS {snapshot}", seconds)
    skipped = sum(1 for k, v, _ in messages if k is None and v is None)
    if failure is not None:
        found.append(f"IGNORE ERRORS failed: {failure[:300]}")
    elif not keyed and rows[0][0] + len(errors) + skipped != len(messages):
        found.append(f"{rows[0][0]} rows + {len(errors)} errors + {skipped} skipped != {len(messages)} messages")

    sides, failure = _attempt(
        session, f'SELECT true, "offset" FROM {ingested} UNION ALL SELECT false, "offset" FROM {ingested}_dlq', seconds
    )
    if failure is not None:
        return found + [f"continuous ingestion failed: {failure[:300]}"]
    kept, lettered = [o for row, o in sides if row], [o for row, o in sides if not row]
    every = [o for o, (k, v, _) in enumerate(messages) if k is not None or v is not None]
    if not keyed and sorted(kept + lettered) != every:
        found.append(f"ingested rows {sorted(kept)} and dead letters {sorted(lettered)} do not cover {every} once")
    if keyed and (len(set(lettered)) != len(lettered) or set(kept) & set(lettered)):
        found.append(f"ingested rows {sorted(kept)} and dead letters {sorted(lettered)} overlap")
    return found


def _snapshot_problems(session: sluice.Session, source: str, errors: set[str], seconds: float) -> list[str]:
    """Whether the snapshot SELECT fails exactly when the source has errors, with one of them."""
    try:
        bounded(session, f"SELECT * FROM {source}", seconds)
    except sluice.SqlError as e:
        if e.message in errors:
            return []
        return [f"snapshot SELECT failed with something else than its errors: {e.message[:300]}"]
    except Exception as e:  # noqa: BLE001 - any other failure is the finding
        return [f"snapshot SELECT failed: {type(e).__name__}: {str(e)[:300]}"]
    return [f"snapshot SELECT succeeded over {len(errors)} errors"] if errors else []


def broken(session: sluice.Session, kafka, registry, poisons: Iterable[Poison],
           seconds: float = 120.0) -> dict[str, list[str]]:
    """The poison kinds that break a source, with what broke. Kinds read the same way share
    one topic; a topic with a problem is tried again kind by kind, to name the culprits."""
    groups: dict[tuple, list[Poison]] = {}
    for poison in poisons:
        groups.setdefault(poison.group, []).append(poison)
    messages = {group: [m for poison in members for m in poison.stamped] for group, members in groups.items()}
    # Every group's sources first: their streams start together, each mostly a Python
    # process of Spark's starting, rather than one after another.
    for number, (formats, envelope) in enumerate(groups):
        prepare(session, kafka, registry, f"g{number}", formats, envelope, messages[formats, envelope])
    found: dict[str, list[str]] = {}
    for number, ((formats, envelope), members) in enumerate(groups.items()):
        shared = findings(session, f"g{number}", envelope, messages[formats, envelope], seconds)
        if not shared:
            continue
        if len(members) == 1:
            found[members[0].name] = shared
            continue
        alone = {
            poison.name: problems(session, kafka, registry, f"g{number}k{index}", formats, envelope, poison.stamped,
                                  seconds)
            for index, poison in enumerate(members)
        }
        # Kinds that break a source only together are each counted.
        found.update({name: p for name, p in alone.items() if p} or {name: shared for name in alone})
    return found


# --- good messages: decoded values equal the values they were written with (issue 36) ---

# Avro types the catalogue's schemas lack, for the round trip.
AVRO_SCALARS = {
    "type": "record",
    "name": "scalars",
    "fields": [
        {"name": "flag", "type": "boolean"},
        {"name": "ratio", "type": "float"},
        {"name": "score", "type": "double"},
        {"name": "blob", "type": "bytes"},
        {"name": "code", "type": {"type": "fixed", "name": "code", "size": 2}},
        {"name": "kind", "type": {"type": "enum", "name": "level", "symbols": ["low", "mid", "high"]}},
        {"name": "maybe", "type": ["null", "long"]},
    ],
}
SCALAR_DATUMS = [
    {"flag": True, "ratio": 0.5, "score": -1e300, "blob": b"\x00\xff", "code": b"ab", "kind": "high", "maybe": -7},
    {"flag": False, "ratio": -2.25, "score": 0.0, "blob": b"", "code": b"\x00\x00", "kind": "low", "maybe": None},
]
# The earliest date; a timestamp a day later (one at 0001-01-01 00:00 fails the query with
# "internal error year 0 is out of range": reported, not fixed here).
EXTREME_DATUM = {
    "id": -(2**31), "n": 2**63 - 1, "s": None, "d": -719_162, "ts": -62_135_510_400_000, "amount": b"\xfb\x2e",
    "tags": [-(2**63), 0], "kind": "b", "attrs": {},
}


def poison_row(datum: dict) -> tuple:
    """A datum of AVRO_SCHEMA (plain values) as the row a query returns."""
    import datetime
    from decimal import Decimal

    epoch = datetime.datetime(1970, 1, 1)
    return (
        datum["id"], datum["n"], datum["s"], epoch.date() + datetime.timedelta(days=datum["d"]),
        epoch + datetime.timedelta(milliseconds=datum["ts"]),
        Decimal(int.from_bytes(datum["amount"], "big", signed=True)).scaleb(-2), datum["tags"], datum["kind"],
        datum["attrs"],
    )


@dataclass(frozen=True)
class Good:
    """Messages (key, value) written by `sluice.kafka.encode` from `written`, read through
    a source with `formats` and `envelope`; `rows` are what its query must return for them
    (in offset order, the offset column left out), after `compare` normalised each."""

    name: str
    formats: str
    messages: tuple[tuple[bytes | None, bytes], ...]
    rows: tuple[tuple, ...]
    envelope: str = ""
    compare: Any = None


def goods(registry_ids: dict[str, int]) -> list[Good]:
    """Good messages of every format the catalogue covers, keys too."""
    import csv
    import io

    from sluice.kafka.encode import avro_from_json, escaped, literal

    reader = registry_ids["poison-value"]
    poison_schema, scalars = fastavro.parse_schema(AVRO_SCHEMA), fastavro.parse_schema(AVRO_SCALARS)
    texts = ["héllo", "a\\x00b", "\\x7f"]
    blobs = [bytes(range(256)), b"", b"\\x00"]
    documents = [{"a": [1, 2.5, "é"], "b": None}, [], "s", -3, None, True]
    records = [["a", "b,c"], ["", 'x"y'], ["\u00e9", " "]]

    def csv_line(fields: list[str]) -> str:
        out = io.StringIO()
        csv.writer(out, lineterminator="").writerow(fields)
        return out.getvalue()

    def json_rows(row: tuple) -> tuple:
        """The jsonb column (the last) parsed, if it is the text a query returns."""
        *rest, document = row
        return (*rest, json.loads(document) if isinstance(document, str) else document)

    def scalar_row(datum: dict) -> tuple:
        # A float column holds the float's double value; these are exact in 32 bits.
        return tuple(datum.values())

    # The datums in Avro's JSON encoding, as the sqllogic runner writes them.
    def json_encoded(datum: dict) -> str:
        return json.dumps({**datum, "blob": datum["blob"].decode("latin-1"), "code": datum["code"].decode("latin-1"),
                           "maybe": None if datum["maybe"] is None else {"long": datum["maybe"]}})

    return [
        Good("text", "FORMAT TEXT", tuple((None, literal(t)) for t in texts),
             tuple((literal(t).decode(),) for t in texts)),
        Good("bytes", "FORMAT BYTES", tuple((None, literal(escaped(b))) for b in blobs), tuple((b,) for b in blobs)),
        Good("json", "FORMAT JSON", tuple((None, literal(json.dumps(d))) for d in documents),
             tuple((d,) for d in documents), compare=json_rows),
        Good("csv", "FORMAT CSV WITH 2 COLUMNS", tuple((None, literal(csv_line(r))) for r in records),
             tuple(tuple(r) for r in records)),
        Good("avro inline", avro_inline(AVRO_SCHEMA),
             tuple((None, encoded(poison_schema, d)) for d in (GOOD_DATUM, EXTREME_DATUM)),
             tuple(poison_row(d) for d in (GOOD_DATUM, EXTREME_DATUM))),
        Good("avro registry", AVRO_REGISTRY,
             tuple((None, wire(reader, encoded(poison_schema, d))) for d in (GOOD_DATUM, EXTREME_DATUM)),
             tuple(poison_row(d) for d in (GOOD_DATUM, EXTREME_DATUM))),
        Good("avro scalars, from Avro's JSON encoding", avro_inline(AVRO_SCALARS),
             tuple((None, avro_from_json(json_encoded(d), scalars)) for d in SCALAR_DATUMS),
             tuple(scalar_row(d) for d in SCALAR_DATUMS)),
        Good("avro clock", avro_inline(AVRO_CLOCK), ((None, clock_datum()),),
             (("01:00:00", "12345678-1234-1234-1234-123456789012"),),
             compare=lambda row: (str(row[0]), str(row[1]))),
        Good("upsert text key, json value", "KEY FORMAT TEXT VALUE FORMAT JSON",
             tuple((literal(t), literal(json.dumps(d))) for t, d in zip(texts, documents, strict=False)),
             tuple((literal(t).decode(), d) for t, d in zip(texts, documents, strict=False)),
             envelope="ENVELOPE UPSERT", compare=json_rows),
        Good("upsert avro key", f"KEY {avro_inline({'type': 'long'})} VALUE {avro_inline(AVRO_SCALARS)}",
             tuple((encoded("long", k), encoded(scalars, d)) for k, d in zip((2**63 - 1, -1), SCALAR_DATUMS,
                                                                          strict=True)),
             tuple((k, *scalar_row(d)) for k, d in zip((2**63 - 1, -1), SCALAR_DATUMS, strict=True)),
             envelope="ENVELOPE UPSERT"),
    ]


def round_trip_problems(session: sluice.Session, kafka, registry, cases: Iterable[Good],
                        seconds: float = 120.0) -> dict[str, str]:
    """The good cases whose rows differ from the values they were written with, with how."""
    found: dict[str, str] = {}
    for number, case in enumerate(cases):
        topic = f"good{number}"
        registry.subjects[f"{topic}-value"] = registry.subjects["poison-value"]
        kafka.create_topic(topic, 1)
        produce(kafka.bootstrap, topic, list(case.messages), partition=0)
        session.execute(f"CREATE SOURCE {topic} FROM KAFKA CONNECTION kafka (TOPIC '{topic}') {case.formats} "
                        f"INCLUDE OFFSET {case.envelope}")
        rows, failure = _attempt(session, f'SELECT * FROM {topic} ORDER BY "offset"', seconds)
        if failure is not None:
            found[case.name] = failure[:300]
            continue
        normalise = case.compare or (lambda row: row)
        got = tuple(normalise(tuple(row[:-1])) for row in rows)
        if got != case.rows:
            found[case.name] = f"read {got!r}, written {case.rows!r}"
    return found
