"""`sluice kafka …`: Kafka from the command line, with kcat's habits.

`serve [--port P] [--brokers N] [--topic T[:N] …]` runs the embedded broker (and its
control socket, `kafka/topics.py`) until interrupted; `topics` and `create-topic T
[--partitions N]` list and make topics; `produce T` writes one message per stdin line
(`-K SEP`: the key is before the first SEP, an empty value is a tombstone; `\\xHH` writes
byte HH; `--format avro --schema FILE` encodes each line, a datum in Avro's JSON encoding,
in the Confluent wire format when `--registry URL` is given); `consume T [-e]
[--from-beginning] [--isolation read_committed|read_uncommitted]` prints partition, offset,
key, value and headers, one message a line (committed ones only unless asked:
`kafka/consume.py`).
Every command but `serve` talks to `--broker HOST:PORT` (default `$SLUICE_BROKER`). The
REPL's `\\produce` takes the same options (`produce_options`) and writes through
`produce_lines`.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sluice.cli.broker import embedded_broker
from sluice.cli.table import format_table
from sluice.errors import ExternalSystemError, InvalidParameterValue

BROKER_VARIABLE = "SLUICE_BROKER"
_SUBCOMMANDS = ("serve", "topics", "create-topic", "produce", "consume")


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return int(text)


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a non-negative integer: {text!r}")
    return int(text)


def _topic_spec(text: str) -> tuple[str, int]:
    name, sep, count = text.rpartition(":")
    return (name, positive(count)) if sep else (text, 1)


def produce_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of `sluice kafka produce` and the REPL's `\\produce`."""
    parser.add_argument("topic", help="the topic to write to")
    parser.add_argument("-K", dest="key_separator", metavar="SEP",
                        help="each line is KEY SEP VALUE (an empty value is a tombstone)")
    parser.add_argument("--partition", type=_non_negative, metavar="N",
                        help="write to partition N (default: the partitioner's choice)")
    parser.add_argument("--create", action="store_true",
                        help="create the topic first if it does not exist")
    parser.add_argument("--partitions", type=positive, default=1, metavar="N",
                        help="partitions of a topic --create makes (default: 1)")
    parser.add_argument("--format", choices=("text", "avro"), default="text",
                        help="text: each line as is, \\xHH a byte; avro: a datum in Avro's JSON encoding")
    parser.add_argument("--schema", metavar="FILE", help="the Avro schema of --format avro")
    parser.add_argument("--registry", metavar="URL",
                        help="register the schema as subject TOPIC-value and write the Confluent wire format")
    return parser


def produce_lines(bootstrap: str, options: argparse.Namespace, lines: Iterable[str]) -> int:
    """Write one message per non-empty line of `lines` as `options` say; how many. A line
    that cannot be encoded is an error naming it, and then nothing is written."""
    from sluice.kafka.embedded import produce
    from sluice.kafka.encode import encode_value, keyed_message
    from sluice.kafka.topics import create_topic, list_topics

    topic = options.topic
    value = _value_encoder(options, encode_value)
    messages: list[tuple[bytes | None, bytes | None]] = []
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line:
            continue
        try:
            if options.key_separator is None:
                messages.append((None, value(line)))
            else:
                messages.append(keyed_message(line, options.key_separator, value))
        except ValueError as e:
            raise InvalidParameterValue(f"line {number}: {e}", detail=line) from None
    partitions = list_topics(bootstrap).get(topic)
    if partitions is None:
        if not options.create:
            raise ExternalSystemError(
                f"topic '{topic}' does not exist on kafka at {bootstrap}",
                hint="add --create (and --partitions N) to create it",
            )
        create_topic(bootstrap, topic, options.partitions)
        partitions = options.partitions
    if options.partition is not None and options.partition >= partitions:
        raise InvalidParameterValue(
            f"topic '{topic}' has no partition {options.partition} (it has {partitions})"
        )
    produce(bootstrap, topic, messages, partition=options.partition)
    return len(messages)


def _value_encoder(options: argparse.Namespace, encode_value: Any) -> Any:
    """How a line's value becomes bytes under `options` (`--format`, `--schema`,
    `--registry`); the schema is read, and registered, before any line is."""
    if options.format == "text":
        if options.schema or options.registry:
            raise InvalidParameterValue("--schema and --registry need --format avro")
        return encode_value
    import fastavro

    if not options.schema:
        raise InvalidParameterValue("--format avro needs --schema FILE")
    try:
        text = Path(options.schema).read_text(encoding="utf-8")
        schema = fastavro.parse_schema(json.loads(text))
    except OSError as e:
        raise InvalidParameterValue(f"cannot read schema {options.schema}: {e.strerror or e}") from None
    except Exception as e:  # not JSON, or not an Avro schema
        raise InvalidParameterValue(f"{options.schema} is not an Avro schema: {e}") from None
    schema_id = None
    if options.registry:
        from sluice.kafka.registry import SchemaRegistry

        schema_id = SchemaRegistry(options.registry).register(f"{options.topic}-value", text)
    name = f"schema {options.schema}"
    return lambda line: encode_value(line, schema, schema_id, schema_name=name)


def _broker(args: argparse.Namespace) -> str:
    broker = args.broker or os.environ.get(BROKER_VARIABLE)
    if not broker:
        raise InvalidParameterValue(
            "no kafka broker given",
            hint=f"pass --broker HOST:PORT or set {BROKER_VARIABLE} (sluice kafka serve prints its address)",
        )
    return broker


def cmd_serve(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with embedded_broker(args.brokers, args.port) as kafka:
        for name, partitions in args.topic:
            kafka.create_topic(name, partitions)
        print(f"kafka listening on {kafka.bootstrap}", flush=True)
        while not stop.wait(0.5):  # timed, in case a signal lands on another thread
            pass
    return 0


def topics_table(broker: str) -> str:
    """The topics of `broker` and their partition counts, as a table."""
    from sluice.kafka.topics import list_topics

    return format_table(("topic", "partitions"), sorted(list_topics(broker).items()))


def cmd_topics(args: argparse.Namespace) -> int:
    print(topics_table(_broker(args)))
    return 0


def cmd_create_topic(args: argparse.Namespace) -> int:
    from sluice.kafka.topics import create_topic

    create_topic(_broker(args), args.topic, args.partitions)
    print(f"created topic '{args.topic}' ({args.partitions} partition{'s' * (args.partitions > 1)})",
          file=sys.stderr)
    return 0


def cmd_produce(args: argparse.Namespace) -> int:
    # Bytes that are not UTF-8 pass through as they are, as `\\xHH` escapes would.
    lines = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape")
    count = produce_lines(_broker(args), args, lines)
    print(f"produced {count} message{'' if count == 1 else 's'} to '{args.topic}'", file=sys.stderr)
    return 0


def cmd_consume(args: argparse.Namespace) -> int:
    from sluice.kafka.consume import consume

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        for line in consume(_broker(args), args.topic, from_beginning=args.from_beginning,
                            exit_at_end=args.exit_at_end, stop=stop, isolation=args.isolation):
            print(line, flush=True)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a consumer without -e ends
    return 0


def add_kafka_commands(commands: Any) -> None:
    """`sluice kafka` and its subcommands, added to the top-level parser's subcommands."""
    kafka = commands.add_parser("kafka", help="Kafka from the command line: serve, topics, produce, consume")
    subcommands = kafka.add_subparsers(dest="kafka_command", required=True)

    def command(name: str, help: str, run: Any, broker: bool = True) -> argparse.ArgumentParser:
        p = subcommands.add_parser(name, help=help)
        if broker:
            p.add_argument("--broker", metavar="HOST:PORT",
                           help=f"the Kafka bootstrap address (default: ${BROKER_VARIABLE})")
        p.set_defaults(run=run)
        return p

    p = command("serve", "run an embedded Kafka broker until interrupted", cmd_serve, broker=False)
    p.add_argument("--port", type=positive, metavar="P",
                   help="listen on 127.0.0.1:P (broker i on P+i-1; default: a free port)")
    p.add_argument("--brokers", type=positive, default=1, metavar="N", help="number of brokers (default: 1)")
    p.add_argument("--topic", type=_topic_spec, action="append", default=[],
                   metavar="NAME[:PARTITIONS]", help="create a topic (repeatable)")
    command("topics", "list the topics and their partition counts", cmd_topics)
    p = command("create-topic", "create a topic", cmd_create_topic)
    p.add_argument("topic", help="the topic's name")
    p.add_argument("--partitions", type=positive, default=1, metavar="N", help="partitions (default: 1)")
    produce_options(command("produce", "write one message per line of stdin (empty lines skipped)",
                            cmd_produce))
    p = command("consume", "print messages: partition, offset, key, value, headers", cmd_consume)
    p.add_argument("topic", help="the topic to read")
    p.add_argument("-e", dest="exit_at_end", action="store_true",
                   help="exit at the end of the topic instead of waiting for more")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the oldest message (default: only new ones)")
    p.add_argument("--isolation", choices=("read_committed", "read_uncommitted"), default="read_committed",
                   help="read_committed (the default) leaves out aborted transactions' messages, on the"
                        " embedded broker by the sinks' progress records; read_uncommitted shows all")


def kafka_argv(argv: list[str]) -> list[str]:
    """`sluice kafka --topic t` (the command before it had subcommands) is `sluice kafka serve`."""
    if argv[:1] == ["kafka"] and (len(argv) == 1 or argv[1] not in (*_SUBCOMMANDS, "-h", "--help")):
        return ["kafka", "serve", *argv[1:]]
    return argv

