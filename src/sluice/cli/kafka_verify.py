"""The sqllogic runner's `kafka-verify` directive — the messages a record lists, written in
`kafka-ingest`'s line syntax, against the messages a topic holds — and the listing of a
record's messages with their headers, which `kafka-ingest` shares (`listed_messages`).

    kafka-verify topic=T [format=bytes|json|avro] [schema=S] [key-format=bytes|json|avro]
                 [key-schema=S] [key-terminator=C] [confluent-wire-format=true|false]
                 [sort-messages=true|false] [headers=all|NAME,NAME…] [timeout=SECONDS]

The topic is read from its beginning as a transactional consumer sees it
(`isolation.level=read_committed`), waiting up to `timeout` seconds (default 120) until it
holds as many messages as the record lists. Messages compare in topic order (partition,
then offset) or, with `sort-messages=true`, both sides sorted. Keys and values compare by
format: `bytes` byte for byte, `json` as parsed JSON (spacing and key order aside), `avro`
as the datum's Avro binary (the schema id of a Confluent frame aside, since a sink's
registry numbers its own schemas). With `headers=`, each message line is followed by its
headers, one `  name=value` line each (indented; the value as `kafka-ingest` reads text,
`\\xHH` escapes and all): `all` compares every header in order, a list of names only those.

A mismatch is the record's failure, its report a diff of the lines expected and the
topic's messages written the same way.
"""

from __future__ import annotations

import difflib
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import fastavro

from sluice.kafka.encode import escaped, literal

ARGS = {
    "topic", "format", "schema", "key-format", "key-schema", "key-terminator",
    "confluent-wire-format", "sort-messages", "headers", "timeout",
}
DEFAULT_TIMEOUT = 120.0

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True)
class Message:
    key: bytes | None
    value: bytes | None
    headers: Headers
    lines: tuple[str, ...]  # as the report shows it: the message line, then its headers


class BadLine(ValueError):
    """A listed line that is not a message or a header; `line` is its text."""

    def __init__(self, summary: str, line: str) -> None:
        super().__init__(summary)
        self.line = line


def problem(args: dict[str, str]) -> str | None:
    """What is wrong with a `kafka-verify` header's arguments beyond `kafka-ingest`'s
    checks, None if nothing."""
    if args.get("sort-messages", "false") not in ("true", "false"):
        return "sort-messages must be true or false"
    if "headers" in args and not all(args["headers"].split(",")):
        return "headers must be all or a list of header names"
    if "timeout" in args:
        try:
            if float(args["timeout"]) <= 0:
                raise ValueError
        except ValueError:
            return "timeout must be a positive number of seconds"
    return None


def listed_messages(
    args: dict[str, str], body: list[tuple[int, str]], encode: Callable[[str], tuple[bytes | None, bytes | None]]
) -> list[Message]:
    """The messages a `kafka-verify` or `kafka-ingest` record lists (`encode` makes a
    line's key and value); `BadLine` for a line that is not one."""
    messages: list[Message] = []
    for line_no, line in body:
        if line[:1].isspace():
            if "headers" not in args or not messages:
                raise BadLine(f"line {line_no}: a header line (indented) needs headers= and a message above it", line)
            name, sep, text = line.strip().partition("=")
            if not sep:
                raise BadLine(f"line {line_no}: a header is written name=value", line)
            last = messages[-1]
            messages[-1] = Message(last.key, last.value, (*last.headers, (name, literal(text))), (*last.lines, line))
            continue
        try:
            key, value = encode(line)
        except Exception as e:  # noqa: BLE001 - whatever the encoder says is the line's problem
            raise BadLine(f"line {line_no}: {e}", line) from None
        messages.append(Message(key, value, (), (line,)))
    return messages


def compare(
    args: dict[str, str], expected: list[Message], got: list, schemas: dict[str, tuple[int, Any]]
) -> list[str] | None:
    """The report lines (a diff) when the topic's messages `got` are not `expected`."""
    shown = [_shown(args, m, schemas) for m in got]
    if args.get("sort-messages") == "true":
        expected = sorted(expected, key=lambda m: _sort_key(args, m))
        shown = sorted(shown, key=lambda m: _sort_key(args, m))
    # A message equal to the one expected at its place shows as written, so that the diff
    # shows only what differs.
    alike = [_comparable(args, e) == _comparable(args, g) for e, g in zip(expected, shown)]
    if len(expected) == len(shown) and all(alike):
        return None
    shown = [e if same else g for e, g, same in zip(expected, shown, alike)] + shown[len(alike) :]
    before = [line for m in expected for line in m.lines]
    after = [line for m in shown for line in m.lines]
    diff = list(difflib.unified_diff(before, after, "expected", f"topic {args['topic']}", lineterm="", n=2))
    if not diff:
        diff = ["(the lines are the same: a key or value written with the key terminator reads back split elsewhere)"]
    return [f"  expected {len(expected)} messages, the topic has {len(shown)}", *("  " + d for d in diff)]


def _shown(args: dict[str, str], message, schemas: dict[str, tuple[int, Any]]) -> Message:
    """A message read from the topic, with the lines `kafka-ingest` would write it as."""
    key, value = message.key(), message.value()
    headers = _selected(args, tuple(message.headers() or ()))
    value_text = _text(value, args.get("format", "bytes"), args.get("schema"), schemas)
    key_format = args.get("key-format")
    if key_format is None:
        line = value_text
    elif key_format == "bytes":
        line = _text(key, "bytes", None, schemas) + args.get("key-terminator", ":") + value_text
    else:
        key_text = _text(key, key_format, args.get("key-schema"), schemas)
        line = key_text if value is None else f"{key_text} {value_text}"
    header_lines = tuple(f"  {name}={'' if v is None else escaped(v)}" for name, v in headers)
    return Message(key, value, headers, (line, *header_lines))


def _selected(args: dict[str, str], headers: Headers) -> Headers:
    wanted = args.get("headers")
    if wanted is None:
        return ()
    if wanted == "all":
        return headers
    names = set(wanted.split(","))
    return tuple(h for h in headers if h[0] in names)


def _text(data: bytes | None, fmt: str, schema: str | None, schemas: dict[str, tuple[int, Any]]) -> str:
    if data is None:
        return ""
    if fmt == "avro" and schema in schemas:
        try:
            datum = fastavro.schemaless_reader(io.BytesIO(_avro_body(data)), schemas[schema][1], None)
            out = io.StringIO()
            fastavro.json_writer(out, schemas[schema][1], [datum])
            return out.getvalue().strip()
        except Exception:  # noqa: BLE001 - not this schema's datum: shown as its bytes
            pass
    return escaped(data)


def _avro_body(data: bytes) -> bytes:
    """The datum of a Confluent frame (magic byte 0, 4-byte schema id), else `data`."""
    return data[5:] if len(data) >= 5 and data[0] == 0 else data


def _comparable(args: dict[str, str], message: Message) -> tuple:
    return (
        _side(message.key, args.get("key-format", "bytes"), args),
        _side(message.value, args.get("format", "bytes"), args),
        message.headers,
    )


def _side(data: bytes | None, fmt: str, args: dict[str, str]) -> Any:
    if data is None:
        return None
    if fmt == "json":
        try:
            return ("json", json.dumps(json.loads(data), sort_keys=True))
        except ValueError:
            return data
    if fmt == "avro" and args.get("confluent-wire-format", "true") == "true":
        return _avro_body(data)
    return data


def _sort_key(args: dict[str, str], message: Message) -> str:
    return repr(_comparable(args, message))
