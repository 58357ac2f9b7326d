"""The reader's decoders on their own (no Spark, no broker)."""

from __future__ import annotations

import io
import json

import fastavro
import pyarrow as pa

from sluice.kafka.decode import AvroDecoder

UNION = {"type": "record", "name": "r", "fields": [
    {"name": "id", "type": "long"},
    {"name": "u", "type": ["null", "int", "string",
                           {"type": "record", "name": "pt", "fields": [{"name": "x", "type": "int"}]}]},
]}


def avro(datum) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(UNION), datum)
    return body.getvalue()


def test_a_top_level_union_of_several_types_decodes_into_its_branch_columns() -> None:
    # Regression: fastavro returns a union's value alone; the Arrow type is a struct of
    # branches, so building the column raised ArrowTypeError and failed the whole query.
    decoder = AvroDecoder(json.dumps(UNION), confluent_wire_format=False)
    payloads = [avro({"id": 1, "u": 42}), avro({"id": 2, "u": "s"}), avro({"id": 3, "u": {"x": 7}}),
                avro({"id": 4, "u": None})]
    data, errors = decoder.decode(payloads, [0, 1, 2, 3])
    assert errors == [None] * 4
    column = pa.array(data, decoder.arrow_type).to_pylist()
    assert [row["u"] for row in column] == [
        {"branch1": 42, "branch2": None, "branch3": None},
        {"branch1": None, "branch2": "s", "branch3": None},
        {"branch1": None, "branch2": None, "branch3": {"x": 7}},
        None,
    ]
