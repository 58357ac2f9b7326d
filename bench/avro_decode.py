"""The Avro decoder's good path on its own (no Spark, no broker): µs per message for
`AvroDecoder.columns` over 100 k valid datums of an eight-field record, in batches as the
reader hands them over, with and without the Confluent header.

Usage: python bench/avro_decode.py [--messages N] [--batch B] [--runs R]

Printed: the best of R runs per wire format, in µs of CPU time per message (CPU time, not
wall time: the figure stays comparable on a loaded machine).
"""

from __future__ import annotations

import argparse
import io
import json
import random
import struct
import time

import fastavro

from sluice.kafka.avro_decode import AvroDecoder

SCHEMA = {
    "type": "record",
    "name": "event",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "n", "type": "int"},
        {"name": "ok", "type": "boolean"},
        {"name": "name", "type": "string"},
        {"name": "score", "type": "double"},
        {"name": "note", "type": ["null", "string"]},
        {"name": "kind", "type": {"type": "enum", "name": "kind", "symbols": ["a", "b", "c"]}},
        {"name": "tags", "type": {"type": "array", "items": "long"}},
    ],
}


def bodies(count: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    parsed = fastavro.parse_schema(SCHEMA)
    out = []
    for i in range(count):
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parsed, {
            "id": rng.randrange(-(2**63), 2**63), "n": rng.randrange(-(2**31), 2**31), "ok": rng.random() < 0.5,
            "name": f"customer {i % 1000}", "score": rng.random() * 1e6,
            "note": None if rng.random() < 0.5 else "ü" * rng.randrange(20),
            "kind": rng.choice("abc"), "tags": [rng.randrange(1000) for _ in range(rng.randrange(4))],
        })
        out.append(body.getvalue())
    return out


def per_message(decoder: AvroDecoder, payloads: list[bytes], batch: int, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.process_time()
        for at in range(0, len(payloads), batch):
            chunk = payloads[at : at + batch]
            _, errors = decoder.columns(chunk, list(range(len(chunk))))
            assert errors.null_count == len(chunk)
        best = min(best, time.process_time() - start)
    return best / len(payloads) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    plain = bodies(args.messages, 1)
    framed = [b"\x00" + struct.pack(">I", 1) + b for b in plain]
    inline = AvroDecoder(json.dumps(SCHEMA), confluent_wire_format=False)
    wire = AvroDecoder(json.dumps(SCHEMA), confluent_wire_format=True)
    print(f"inline schema: {per_message(inline, plain, args.batch, args.runs):.2f} µs/message")
    print(f"confluent wire format: {per_message(wire, framed, args.batch, args.runs):.2f} µs/message")


if __name__ == "__main__":
    main()
