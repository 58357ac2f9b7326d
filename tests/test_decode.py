"""The reader's decoders on their own (no Spark): whatever the bytes — arbitrary, nested deep,
huge counts and lengths, numbers out of range, invalid UTF-8, truncated, valid Avro datums
mutated — a decoder never raises, gives one datum or one error per payload, and its Arrow
columns (and the reader's whole batch) always build."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sluice.catalog.formats import AvroInline, Csv, Json
from sluice.kafka.avro_decode import AvroDecoder
from sluice.kafka.avro_schema import parse_schema
from sluice.kafka.csv_decode import CsvDecoder
from sluice.kafka.decode import describe_bytes
from sluice.kafka.embedded import produce
from sluice.kafka.encode import avro_datum
from sluice.kafka.json_decode import _CHECKED_JSON, JSON_MAX_BYTES, JsonDecoder
from sluice.kafka.json_scan import _SerdeScan
from sluice.spark.kafka_source import Options, decode_spec, read_range
from sluice.syntax.ast import AvroFormat, CsvFormat, InlineSchema, JsonFormat, StringLiteral
from tests.support import poison
from tests.support.registry import Registry

UNION = {"type": "record", "name": "r", "fields": [
    {"name": "id", "type": "long"},
    {"name": "u", "type": ["null", "int", "string",
                           {"type": "record", "name": "pt", "fields": [{"name": "x", "type": "int"}]}]},
]}
MANY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def avro(datum) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(UNION), datum)
    return body.getvalue()


def outcomes(decoder, payloads: list[bytes | None]) -> list[tuple]:
    """(datum, error) per payload, checking what holds for every decoder and payload: the
    columns build, a NULL payload gives neither, any other exactly one, and an error ends
    with its payload's bytes."""
    data, errors = decoder.columns(payloads, list(range(len(payloads))))
    assert isinstance(data, pa.Array) and data.type == decoder.arrow_type
    pairs = list(zip(data.to_pylist(), errors.to_pylist(), strict=True))
    assert len(pairs) == len(payloads)
    for payload, (datum, error) in zip(payloads, pairs, strict=True):
        if payload is None:
            assert (datum, error) == (None, None)
        else:
            assert (datum is None) != (error is None), (payload, datum, error)
            assert error is None or error.endswith(" " + describe_bytes(payload))
    return pairs


def error_of(decoder, payload: bytes) -> str | None:
    ((_, error),) = outcomes(decoder, [payload])
    return error


# --- strategies -------------------------------------------------------------------------

def nested(opening: bytes, closing: bytes):
    return st.builds(lambda n, closed: opening * n + (closing * n if closed else b""),
                     st.integers(1, 60_000), st.booleans())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)
json_numbers = st.builds(
    lambda sign, digits, fraction, exponent: f"{sign}{digits}{fraction}{exponent}".encode(),
    st.sampled_from(["", "-"]),
    st.one_of(st.integers(1, 10**20).map(str), st.integers(90, 1_100).map(lambda n: "1" * n)),
    st.sampled_from(["", ".5", "." + "7" * 600]),
    st.one_of(st.just(""), st.integers(-999, 999).map(lambda e: f"e{e}")),
)
json_surrogates = st.integers(0xD700, 0xE000).map(lambda c: b'["\\u%04x"]' % c)


def mutated(valid: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """`valid` payloads, some cut short, some with garbage (or a lone invalid byte) added."""
    return st.builds(
        lambda payload, how, cut, garbage: {
            "keep": payload,
            "truncate": payload[: cut % (len(payload) + 1)],
            "append": payload + garbage,
            "insert": payload[: cut % (len(payload) + 1)] + garbage + payload[cut % (len(payload) + 1):],
        }[how],
        valid, st.sampled_from(["keep", "truncate", "append", "insert"]), st.integers(0, 2**16),
        st.one_of(st.binary(min_size=1, max_size=8), st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\x00"])),
    )


json_payloads = st.one_of(
    st.binary(max_size=64),
    mutated(json_values.map(lambda v: json.dumps(v).encode())),
    nested(b"[", b"]"), nested(b'{"a":', b"}"), json_numbers, json_surrogates,
    st.just(b'{"a": 1, "a": [2]}'), st.just(b'{"' + b"k" * 50_001 + b'": 0}'),
)
csv_payloads = st.one_of(
    st.binary(max_size=64),
    st.text(alphabet=',;"\n\r\x00ab\u00e9', max_size=40).map(str.encode),
    mutated(st.lists(st.text(alphabet="ab ,", max_size=5), min_size=1, max_size=4).map(lambda f: ",".join(f).encode())),
    st.just(b"x" * 140_000 + b",y"),
)


def varints(low: int = -(2**70), high: int = 2**70):
    return st.integers(low, high).map(poison.varint)


def either(valid, hostile):
    return st.one_of(valid, hostile)


def counted(items: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    """An Avro string or bytes: its length, then itself."""
    return items.map(lambda body: poison.varint(len(body)) + body)


# Raw encodings of fields of poison.AVRO_SCHEMA, each in range or hostile.
avro_fields = st.fixed_dictionaries({}, optional={
    "id": either(varints(-(2**31), 2**31 - 1), varints()),
    "n": either(varints(-(2**63), 2**63 - 1), st.just(b"\xff" * 20 + b"\x01")),
    "s": either(st.just(b"\x00") | counted(st.text(max_size=8).map(str.encode)).map(lambda v: b"\x02" + v),
                st.builds(lambda i, n, text: i + n + text, varints(-3, 3), varints(-(2**40), 2**40),
                          st.binary(max_size=8))),
    "d": either(varints(-719_162, 2_932_896), varints(-(2**40), 2**40)),
    "ts": either(varints(-62_135_596_800_000, 253_402_300_799_999), varints(-(2**64), 2**64)),
    "amount": either(counted(st.binary(max_size=2)), counted(st.binary(max_size=24))),
    "tags": either(st.lists(varints(-(2**63), 2**63 - 1), max_size=3).map(
        lambda items: poison.varint(len(items)) + b"".join(items) + b"\x00" if items else b"\x00"),
        st.builds(lambda count, items: count + items, varints(-(2**63), 2**63), st.binary(max_size=8))),
    "kind": either(st.sampled_from([b"\x00", b"\x02"]), varints(-3, 5)),
    "attrs": either(st.just(b"\x00"), st.builds(lambda count, rest: count + rest, varints(), st.binary(max_size=12))),
})
avro_bodies = st.one_of(st.binary(max_size=64), mutated(avro_fields.map(lambda raw: poison.avro_datum(**raw))))
clock_bodies = mutated(st.builds(
    poison.clock_datum,
    st.integers(-(2**40), 2**40) | st.integers(0, 86_399_999),
    st.one_of(st.uuids().map(lambda u: str(u).encode()), st.uuids().map(lambda u: str(u).upper().encode()),
              st.binary(max_size=40)),
))


@pytest.fixture(scope="module")
def registry():
    server = Registry(poison.REGISTRY_SUBJECTS)
    yield server
    server.close()


def registry_ids(registry) -> dict[str, int]:
    return {name: registry.subjects[name][0] for name in poison.REGISTRY_SUBJECTS}


def registry_payloads(ids: dict[str, int]):
    """Confluent-framed datums for every schema id the registry knows (and one it does not):
    the reader's, a recursive writer nested deep, a writer of arrays of items of no bytes."""
    return st.one_of(
        st.builds(poison.wire, st.sampled_from([*ids.values(), 999]), avro_bodies),
        st.builds(lambda body, depth: poison.wire(ids["recursive"], body + b"\x02" * depth + b"\x00"),
                  avro_bodies, st.integers(1, 20_000)),
        st.builds(lambda body, count: poison.wire(ids["zero-width"], body + poison.varint(count) + b"\x00"),
                  avro_bodies, st.integers(1, 2**62)),
        st.binary(max_size=8),
    )


def batches(payloads):
    return st.lists(st.none() | payloads, max_size=6)


# --- every decoder, any payload ---------------------------------------------------------

@MANY
@given(batches(json_payloads))
@example([b"[" * 50_000 + b"]" * 50_000, b'{"a": 1, "a": 2}', b'"\\ud800"', b"1e400", b"1" * 1001])
def test_json_decoder_never_raises(payloads) -> None:
    outcomes(JsonDecoder(), payloads)


@MANY
@given(batches(csv_payloads), st.sampled_from([(2, ","), (3, ";"), (1, "\t")]))
def test_csv_decoder_never_raises(payloads, shape) -> None:
    outcomes(CsvDecoder(*shape), payloads)


@MANY
@given(st.sampled_from([(poison.AVRO_SCHEMA, avro_bodies), (poison.AVRO_CLOCK, clock_bodies)]).flatmap(
    lambda pair: st.tuples(st.just(pair[0]), batches(pair[1]))), st.booleans())
@example((poison.AVRO_SCHEMA, [poison.avro_datum(id=poison.varint(999_999_999_999)), poison.avro_datum()]), False)
def test_avro_decoder_never_raises(schema_and_payloads, wire_format) -> None:
    schema, payloads = schema_and_payloads
    if wire_format:
        payloads = [None if p is None else poison.wire(1, p) for p in payloads]
    outcomes(AvroDecoder(json.dumps(schema), confluent_wire_format=wire_format), payloads)


@MANY
@given(data=st.data())
def test_avro_decoder_through_a_registry_never_raises(registry, data) -> None:
    ids = registry_ids(registry)
    decoder = AvroDecoder(json.dumps(poison.AVRO_SCHEMA), registry_url=registry.url)
    outcomes(decoder, data.draw(batches(registry_payloads(ids))))


@MANY
@given(batches(st.one_of(st.binary(max_size=12), varints().map(lambda v: v + b"\x00"), varints())))
def test_avro_keys_and_debezium_envelopes_never_raise(payloads) -> None:
    for schema in ({"type": "int"}, poison.DEBEZIUM_KEY, poison.DEBEZIUM_VALUE):
        outcomes(AvroDecoder(json.dumps(schema), confluent_wire_format=False), payloads)


# --- the reader's batches ---------------------------------------------------------------

@pytest.fixture(scope="module")
def broker():
    from sluice.kafka.embedded import EmbeddedKafka

    with EmbeddedKafka() as cluster:
        yield cluster


DECODE_SPECS = {
    "json": decode_spec(Json.for_source(JsonFormat(), None, None)),
    "csv": decode_spec(Csv.for_source(CsvFormat(column_count=2), None, None)),
    "avro": decode_spec(AvroInline.for_source(
        AvroFormat(InlineSchema(StringLiteral(json.dumps(poison.AVRO_SCHEMA)), False)), None, None)),
}
any_payload = st.one_of(json_payloads, csv_payloads, avro_bodies)
topics = iter(range(10**6))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.none() | any_payload, st.none() | any_payload), min_size=1, max_size=5),
       st.sampled_from(sorted(DECODE_SPECS)), st.sampled_from(sorted(DECODE_SPECS)),
       st.one_of(st.none(), st.sampled_from([2**62, 253_402_300_800_000, 0])))
def test_reader_batches_always_build(broker, messages, key_format, value_format, timestamp_ms) -> None:
    topic = f"b{next(topics)}"
    broker.create_topic(topic, 1)
    produce(broker.bootstrap, topic, messages, partition=0, timestamp_ms=timestamp_ms)
    options = Options(broker.bootstrap, topic, {}, decode={"key": DECODE_SPECS[key_format],
                                                           "value": DECODE_SPECS[value_format]})
    (batch,) = read_range(options, 0, 0, len(messages))
    assert batch.num_rows == len(messages)
    for side, index in (("key", 0), ("value", 1)):
        data, errors = batch.column(f"{side}_data").to_pylist(), batch.column(f"{side}_error").to_pylist()
        for message, datum, error in zip(messages, data, errors, strict=True):
            assert (message[index] is None) == (datum is None and error is None)
    stamps = batch.column("timestamp").to_pylist()
    assert all(s is None for s in stamps) if timestamp_ms and timestamp_ms > 253_402_300_799_999 else None not in stamps


# --- regression cases: what broke a source before -----------------------------------------

def test_json_nested_past_serde_jsons_limit_is_an_error_naming_the_bracket() -> None:
    assert error_of(JsonDecoder(), b"[" * 127 + b"]" * 127) is None
    assert error_of(JsonDecoder(), b"[" * 50_000).startswith(
        "Failed to decode JSON: recursion limit exceeded at line 1 column 128 ("
    )
    assert error_of(JsonDecoder(), b'{"a":\n [' + b"[" * 200).startswith(
        "Failed to decode JSON: recursion limit exceeded at line 2 column 128 ("
    )


def test_json_that_spark_would_refuse_is_an_error() -> None:
    decoder = JsonDecoder()
    assert error_of(decoder, b"[1e400]").startswith('Failed to decode JSON: "1e400" is out of range for type numeric (')
    assert error_of(decoder, b"1" * 1001).startswith(f'Failed to decode JSON: "{"1" * 40}…" is out of range for type numeric')
    assert error_of(decoder, b'{"x": "\\udc00"}').startswith(
        "Failed to decode JSON: lone leading surrogate in hex escape at line 1 column 13 ("
    )
    assert error_of(decoder, b'"\\ud83d\\ude00"') is None
    assert error_of(decoder, b'{"' + b"k" * 50_001 + b'": 1}').startswith(
        "Failed to decode JSON: object key of 50001 characters exceeds the limit of 50000"
    )
    huge = b'"' + b"a" * JSON_MAX_BYTES + b'"'
    assert error_of(decoder, huge).startswith(
        f"Failed to decode JSON: document of {len(huge)} bytes exceeds the limit of {JSON_MAX_BYTES}"
    )
    # PostgreSQL's jsonb (and Spark, as sluice sets it up) keeps a repeated key's last value.
    assert outcomes(decoder, [b'{"a": 1, "a": 2}']) == [('{"a": 1, "a": 2}', None)]


@pytest.mark.parametrize(
    "number, fits",
    [("4.9E-324", False), ("1e-40", False), ("1e-39", True), ("-1E-39", True), ("0e-400", True),
     ("9" * 39, True), ("1" + "0" * 39, False), ("1e39", False), ("-9.99e38", True), ("0.5", True),
     ("0." + "0" * 39 + "1", False), ("12345678901234567890.123456789012345678901234", True)],
)
def test_jsonb_numbers_are_numerics(number: str, fits: bool) -> None:
    """Materialize's jsonb numbers are numeric: 39 digits, 1e-39 ≤ |x| < 1e39 (or 0)."""
    error = error_of(JsonDecoder(), f'{{"n": [{number}]}}'.encode())
    assert (error is None) == fits
    if not fits:
        shown = number if len(number) <= 40 else number[:40] + "…"
        assert error.startswith(f'Failed to decode JSON: "{shown}" is out of range for type numeric (')


# serde_json's error for every kind Python's parser reports, and for what Python takes and
# serde_json refuses, at serde_json's position: the column counts the bytes of the line up
# to the one serde_json stopped after (or, peeking, at).
SERDE_ERRORS = [
    (b"", "EOF while parsing a value at line 1 column 0"),
    (b" \n", "EOF while parsing a value at line 2 column 0"),
    (b"{oops", "key must be a string at line 1 column 2"),
    (b"{", "EOF while parsing an object at line 1 column 1"),
    (b'{"a"', "EOF while parsing an object at line 1 column 4"),
    (b'{"a" 1}', "expected `:` at line 1 column 6"),
    (b'{"a":1 "b":2}', "expected `,` or `}` at line 1 column 8"),
    (b'{"a":1,}', "trailing comma at line 1 column 8"),
    (b'{"a":', "EOF while parsing a value at line 1 column 5"),
    (b"[1 2]", "expected `,` or `]` at line 1 column 4"),
    (b"[1,]", "trailing comma at line 1 column 4"),
    (b"[1,", "EOF while parsing a value at line 1 column 3"),
    (b"[1", "EOF while parsing a list at line 1 column 2"),
    (b"[,1]", "expected value at line 1 column 2"),
    (b"1 2", "trailing characters at line 1 column 3"),
    (b"[1]]", "trailing characters at line 1 column 4"),
    (b"nul", "EOF while parsing a value at line 1 column 3"),
    (b"nulL", "expected ident at line 1 column 4"),
    (b"NaN", "expected value at line 1 column 1"),
    (b"[Infinity]", "expected value at line 1 column 2"),
    (b"-Infinity", "invalid number at line 1 column 2"),
    (b"-", "EOF while parsing a value at line 1 column 1"),
    (b"01", "invalid number at line 1 column 2"),
    (b"1.", "EOF while parsing a value at line 1 column 2"),
    (b"[1.]", "invalid number at line 1 column 4"),
    (b"1e", "EOF while parsing a value at line 1 column 2"),
    (b"[1e]", "invalid number at line 1 column 4"),
    (b'"abc', "EOF while parsing a string at line 1 column 4"),
    (b'"a\tb"', "control character (\\u0000-\\u001F) found while parsing a string at line 1 column 3"),
    (b'"\\x"', "invalid escape at line 1 column 3"),
    (b'"\\u12G4"', "invalid escape at line 1 column 6"),
    (b'"\\u12', "EOF while parsing a string at line 1 column 5"),
    (b'"\\udc00"', "lone leading surrogate in hex escape at line 1 column 7"),
    (b'"\\ud800"', "unexpected end of hex escape at line 1 column 8"),
    (b'"\\ud800\\n"', "unexpected end of hex escape at line 1 column 9"),
    (b'"\\ud800\\u0041"', "lone leading surrogate in hex escape at line 1 column 13"),
    (b'"\xff"', "invalid unicode code point at line 1 column 3"),
    (b'"\xed\xa0\x80"', "invalid unicode code point at line 1 column 5"),
    (b"\xef\xbb\xbf{}", "expected value at line 1 column 1"),
    (b'{"a":\n  [1,\n   2 3]}', "expected `,` or `]` at line 3 column 6"),
    (b"[" * 128, "recursion limit exceeded at line 1 column 128"),
    (b"[1, x" + b"[" * 200, "expected value at line 1 column 5"),
    (b"[1000000000000000000000000000000e9]", '"1000000000000000000000000000000e9" is out of range for type numeric'),
    (b"[1e99999999999999999999]", '"1e99999999999999999999" is out of range for type numeric'),
]


@pytest.mark.parametrize("payload, text", SERDE_ERRORS)
def test_json_errors_are_serde_jsons(payload: bytes, text: str) -> None:
    assert error_of(JsonDecoder(), payload) == f"Failed to decode JSON: {text} {describe_bytes(payload)}"


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='[]{}",:0123456789.eE+- \ntrufalsn\\/u', max_size=24))
def test_serde_scan_agrees_with_pythons_parser(text: str) -> None:
    """Where both decide alike (the alphabet spells no NaN, no surrogate; the checked
    parser refuses numbers out of range), serde_json's reading accepts what Python's does."""
    try:
        _CHECKED_JSON.decode(text)
        accepted = True
    except ValueError:
        accepted = False
    assert (_SerdeScan(text.encode()).problem() is None) == accepted


@st.composite
def spelled_numbers(draw) -> tuple[list[str], int]:
    """Spellings of one number `digits` × 10^exponent, and the power of ten of its leading
    digit."""
    digits = str(draw(st.integers(1, 10**45)))
    exponent = draw(st.integers(-90, 90) | st.integers(-(10**15), 10**15))
    leading = len(digits) - 1 + exponent
    sign = draw(st.sampled_from(["", "-"]))
    zeros = draw(st.integers(0, 45))
    spellings = [
        f"{digits}e{exponent}",
        f"{digits[0]}.{digits[1:]}E{leading:+}" if len(digits) > 1 else f"{digits}E{leading:+}",
        f"{digits}{'0' * zeros}e{exponent - zeros}",
        f"0.{'0' * zeros}{digits}e{exponent + zeros + len(digits)}",
        f"{digits}e{'-' if exponent < 0 else ''}{'0' * zeros}{abs(exponent)}",
    ]
    if 0 <= exponent <= 90:
        spellings.append(digits + "0" * exponent)
    elif -90 <= exponent < 0:
        point = len(digits) + exponent
        spellings.append(f"{digits[:point]}.{digits[point:]}" if point > 0 else f"0.{'0' * -point}{digits}")
    return [sign + s for s in spellings], leading


@settings(max_examples=400, deadline=None)
@given(spelled_numbers())
@example((["1000000000000000000000000000000e9", "1e39", "0.1e40"], 39))
@example((["1e-39", "0.000000000000000000000000000000000000001", "100e-41"], -39))
@example((["9" * 39, "9.99999999999999999999999999999999999999e38"], 38))
def test_jsonb_number_range_is_by_value_whatever_the_spelling(spelled) -> None:
    """A number is refused exactly when its value is outside numeric's range, each
    spelling of it alike — an exponent of any length included."""
    spellings, leading = spelled
    fits = -39 <= leading < 39
    for number in spellings:
        error = error_of(JsonDecoder(), f'{{"n": [{number}]}}'.encode())
        assert (error is None) == fits, number
        if not fits:
            assert error.startswith(f'Failed to decode JSON: "{number if len(number) <= 40 else number[:40] + "…"}" is')


def test_csv_field_of_a_mebibyte_decodes() -> None:
    field = b"x" * (1 << 20)
    assert outcomes(CsvDecoder(2), [field + b',"' + field + b'"']) == [([field.decode(), field.decode()], None)]


def test_avro_defaults_of_another_type_are_taken_and_unused() -> None:
    """A reader schema whose defaults fastavro would refuse is taken, as Materialize takes
    it; a writer schema without such a field is its messages' error, a good default is used."""
    reader = {"type": "record", "name": "r", "fields": [
        {"name": "a", "type": "long"},
        {"name": "i", "type": "int", "default": 1.0},
        {"name": "s", "type": "string", "default": None},
        {"name": "n", "type": ["null", "long"], "default": None},
    ]}
    writer = {"type": "record", "name": "r", "fields": [{"name": "a", "type": "long"}]}
    decoder = AvroDecoder(json.dumps(reader), registry_url="http://registry.invalid")
    decoder.writers[1] = parse_schema(writer)
    payload = b"\x00\x00\x00\x00\x01" + avro_datum(parse_schema(writer), {"a": 5})
    assert error_of(decoder, payload).startswith(
        "avro deserialization error: SchemaResolutionError: No default value for field i in r ("
    )
    usable = {**reader, "fields": [reader["fields"][0], reader["fields"][3]]}
    decoder = AvroDecoder(json.dumps(usable), registry_url="http://registry.invalid")
    decoder.writers[1] = parse_schema(writer)
    assert outcomes(decoder, [payload]) == [({"a": 5, "n": None}, None)]


def avro_error(schema: dict, payload: bytes) -> str | None:
    return error_of(AvroDecoder(json.dumps(schema), confluent_wire_format=False), payload)


def test_avro_values_arrow_cannot_hold_are_errors_of_their_message_alone() -> None:
    decoder = AvroDecoder(json.dumps(poison.AVRO_SCHEMA), confluent_wire_format=False)
    bad = poison.avro_datum(id=poison.varint(999_999_999_999))
    (good, _), (none, error), (again, _) = outcomes(decoder, [poison.avro_datum(), bad, poison.avro_datum()])
    assert good == again and good["id"] == 1 and none is None
    assert error == f"avro deserialization error: Expected i32, got: 999999999999 {describe_bytes(bad)}"


@pytest.mark.parametrize(("schema", "payload", "text"), [
    (poison.AVRO_SCHEMA, poison.avro_datum(d=poison.varint(2**31 - 1)), "Date out of range: 2147483647"),
    (poison.AVRO_SCHEMA, poison.avro_datum(ts=poison.varint(2**62)), "Invalid ms timestamp 4611686018427387.904"),
    (poison.AVRO_SCHEMA, poison.avro_datum(ts=poison.varint(-(2**62))), "Invalid ms timestamp -4611686018427387.904"),
    (poison.AVRO_CLOCK, poison.clock_datum(t=-1), "Invalid ms time -1"),
    (poison.AVRO_CLOCK, poison.clock_datum(t=86_400_000), "Invalid ms time 86400000"),
    (poison.AVRO_CLOCK, poison.clock_datum(u=b"abc"), "UUID decoding failed: badly formed hexadecimal UUID string"),
    (poison.AVRO_SCHEMA, poison.avro_datum(amount=poison.varint(20) + b"\x7f" * 20),
     "Error decoding numeric: exceeds maximum precision 6"),
    (poison.AVRO_SCHEMA, poison.avro_datum(s=b"\x02\x04\xff\xfe"), "String was not valid UTF-8"),
    (poison.AVRO_SCHEMA, poison.avro_datum(s=poison.varint(7)), "Union index out of bounds: 7 (len: 2)"),
    (poison.AVRO_SCHEMA, poison.avro_datum(tags=poison.varint(2**62) + b"\x02"), "unexpected end of datum"),
])
def test_avro_out_of_range_values_have_materialize_style_texts(schema, payload, text) -> None:
    assert avro_error(schema, payload).startswith(f"avro deserialization error: {text} (")


def test_avro_logical_types_decode_to_their_column_types() -> None:
    # Regression: a UUID (fastavro's own UUID object) failed the whole batch, and TIME was
    # microseconds where Spark expects nanoseconds, failing every query.
    decoder = AvroDecoder(json.dumps(poison.AVRO_SCHEMA), confluent_wire_format=False)
    (row, _), = outcomes(decoder, [poison.avro_datum()])
    assert decoder.arrow_type.field("ts").type == pa.timestamp("us", tz="UTC")
    assert (str(row["d"]), row["ts"].isoformat(), str(row["amount"])) == (
        "2022-01-08", "2023-11-14T22:13:20+00:00", "12.34"
    )
    clock = AvroDecoder(json.dumps(poison.AVRO_CLOCK), confluent_wire_format=False)
    (row, _), = outcomes(clock, [poison.clock_datum()])
    assert clock.arrow_type.field("t").type == pa.time64("ns")
    assert (str(row["t"]), row["u"]) == ("01:00:00", "12345678-1234-1234-1234-123456789012")


def test_datums_that_cost_more_than_their_bytes_are_refused(registry) -> None:
    ids = registry_ids(registry)
    decoder = AvroDecoder(json.dumps(poison.AVRO_SCHEMA), registry_url=registry.url)
    deep = poison.wire(ids["recursive"], poison.avro_datum() + b"\x02" * 50_000 + b"\x00")
    endless = poison.wire(ids["zero-width"], poison.avro_datum() + poison.varint(2**62) + b"\x00")
    (_, recursive), (_, zero), (good, _) = outcomes(decoder, [deep, endless, poison.wire(ids["poison-value"],
                                                                                         poison.avro_datum())])
    assert recursive.startswith(
        'avro deserialization error: writer schema with a recursive type "node" is not supported ('
    )
    assert zero.startswith("avro deserialization error: more than 10000 array or map items that take no bytes (")
    assert good["id"] == 1


def test_a_top_level_union_of_several_types_decodes_into_its_branch_columns() -> None:
    # Regression: fastavro returns a union's value alone; the Arrow type is a struct of
    # branches, so building the column raised ArrowTypeError and failed the whole query.
    decoder = AvroDecoder(json.dumps(UNION), confluent_wire_format=False)
    payloads = [avro({"id": 1, "u": 42}), avro({"id": 2, "u": "s"}), avro({"id": 3, "u": {"x": 7}}),
                avro({"id": 4, "u": None})]
    assert [row["u"] for row, _ in outcomes(decoder, payloads)] == [
        {"branch1": 42, "branch2": None, "branch3": None},
        {"branch1": None, "branch2": "s", "branch3": None},
        {"branch1": None, "branch2": None, "branch3": {"x": 7}},
        None,
    ]


# --- what fastavro alone reads wrongly (issue 36): a reference model --------------------

STRICT = {"type": "record", "name": "strict", "fields": [
    {"name": "l", "type": "long"},
    {"name": "i", "type": "int"},
    {"name": "b", "type": "boolean"},
    {"name": "e", "type": {"type": "enum", "name": "e", "symbols": ["a", "b", "c"]}},
    {"name": "u", "type": ["null", "string"]},
]}


@st.composite
def raw_varints(draw) -> bytes:
    """A varint of 1 to 12 bytes, any 7 bits in each: past 10 bytes, or with bits past 64
    in its 10th, it overflows; non-minimal ones (trailing zero groups) are valid."""
    groups = draw(st.lists(st.integers(0, 127), min_size=1, max_size=12))
    return bytes(g | 0x80 for g in groups[:-1]) + bytes([groups[-1]])


def zigzag(raw: bytes) -> int | str:
    """The reference reading of a raw varint: its value, or mz-avro's overflow text."""
    z = sum((b & 0x7F) << (7 * n) for n, b in enumerate(raw))
    if len(raw) > 10 or z >> 64:
        return "Overflow when decoding integer value"
    return (z >> 1) ^ -(z & 1)


def expected_reading(l_raw: bytes, i_raw: bytes, flag: int, enum_index: int, union_index: int) -> dict | str:
    """What a datum of STRICT with these parts decodes to, or the text of its first error."""
    long_value, int_value = zigzag(l_raw), zigzag(i_raw)
    if isinstance(long_value, str):
        return long_value
    if isinstance(int_value, str):
        return int_value
    if not -(2**31) <= int_value < 2**31:
        return f"Expected i32, got: {int_value}"
    if flag > 1:
        return f"Invalid boolean: {flag:x}"
    for index, size, kind in ((enum_index, 3, "Enum symbol"), (union_index, 2, "Union")):
        if index < 0:
            return f"Expected non-negative integer, got {index}"
        if index >= size:
            return f"{kind} index out of bounds: {index} (len: {size})"
    return {"l": long_value, "i": int_value, "b": flag == 1, "e": "abc"[enum_index],
            "u": "x" if union_index == 1 else None}


def strict_datum(l_raw: bytes, i_raw: bytes, flag: int, enum_index: int, union_index: int) -> bytes:
    return (l_raw + i_raw + bytes([flag]) + poison.varint(enum_index) + poison.varint(union_index)
            + (b"\x02x" if union_index == 1 else b""))


@pytest.fixture(scope="module")
def strict_registry():
    server = Registry({"strict-value": STRICT})
    yield server
    server.close()


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(raw_varints(), raw_varints(), st.integers(0, 255), st.integers(-5, 5), st.integers(-5, 5))
@example(b"\xff" * 10 + b"\x01", b"\x02", 1, 0, 0)  # read as -2^63 before
@example(b"\x0a", poison.varint(2**64 + 5), 1, 0, 0)  # read as 5 before
@example(b"\x0a", b"\x02", 2, 0, 0)  # read as true before
@example(b"\x0a", b"\x02", 1, -1, 0)  # read as the last symbol before
@example(b"\x0a", b"\x02", 1, 0, -1)  # read as the string branch before
@example(b"\x0a", b"\x02", 1, 0, -2)  # read as NULL before
def test_avro_decoding_agrees_with_a_reference_model(strict_registry, l_raw, i_raw, flag, enum_index,
                                                     union_index) -> None:
    """Each datum decodes to the model's value or fails with the model's first error: bare,
    behind the Confluent header (the reader schema as the writer's), and through a registry."""
    body = strict_datum(l_raw, i_raw, flag, enum_index, union_index)
    (schema_id, _), = strict_registry.subjects.values()
    header = b"\x00" + schema_id.to_bytes(4, "big")
    expected = expected_reading(l_raw, i_raw, flag, enum_index, union_index)
    for decoder, payload in (
        (AvroDecoder(json.dumps(STRICT), confluent_wire_format=False), body),
        (AvroDecoder(json.dumps(STRICT)), header + body),
        (AvroDecoder(json.dumps(STRICT), registry_url=strict_registry.url), header + body),
    ):
        (datum, error), = outcomes(decoder, [payload])
        if isinstance(expected, str):
            assert error == f"avro deserialization error: {expected} {describe_bytes(payload)}"
        else:
            assert (datum, error) == (expected, None)


def test_an_invalid_string_before_a_fault_is_the_first_error() -> None:
    schema = {"type": "record", "name": "r", "fields": [{"name": "s", "type": "string"},
                                                         {"name": "b", "type": "boolean"}]}
    assert avro_error(schema, b"\x02\xff\x02").startswith("avro deserialization error: String was not valid UTF-8 (")
    assert avro_error(schema, b"\x02a\x05").startswith("avro deserialization error: Invalid boolean: 5 (")


def test_null_and_empty_records_decode_to_nulls_and_empty_records() -> None:
    """Arrays, maps and unions of `null`, a `null` field, records of no fields (issue 35):
    NULL texts, and a record whose one placeholder field is NULL (Parquet writes no empty
    struct)."""
    schema = {"type": "record", "name": "r", "fields": [
        {"name": "a", "type": {"type": "array", "items": "null"}},
        {"name": "m", "type": {"type": "map", "values": "null"}},
        {"name": "u", "type": ["null"]},
        {"name": "n", "type": "null"},
        {"name": "e", "type": {"type": "record", "name": "e", "fields": []}},
        {"name": "ae", "type": {"type": "array", "items": "e"}},
    ]}
    decoder = AvroDecoder(json.dumps(schema), confluent_wire_format=False)
    assert decoder.arrow_type == pa.struct([
        ("a", pa.list_(pa.string())), ("m", pa.map_(pa.string(), pa.string())), ("u", pa.string()),
        ("n", pa.string()), ("e", pa.struct([("_empty", pa.bool_())])),
        ("ae", pa.list_(pa.struct([("_empty", pa.bool_())]))),
    ])
    empty = {"_empty": None}
    assert outcomes(decoder, [b"\x04\x00\x02\x02k\x00\x00\x06\x00", b"\x00\x00\x00\x00"]) == [
        ({"a": [None, None], "m": [("k", None)], "u": None, "n": None, "e": empty, "ae": [empty] * 3}, None),
        ({"a": [], "m": [], "u": None, "n": None, "e": empty, "ae": []}, None),
    ]
    too_many = poison.varint(10_001) + b"\x00\x00\x00\x00"
    assert error_of(decoder, too_many).startswith(
        "avro deserialization error: more than 10000 array or map items that take no bytes (")
