"""The Kafka broker a shell or a script starts with: an embedded one (with its control
socket, so that other processes can create topics on it) or one named, and the catalog
connection `kafka` to it; and the version the commands report."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sluice.session import Session

if TYPE_CHECKING:
    from sluice.kafka.embedded import EmbeddedKafka

CONNECTION_NAME = "kafka"


def version() -> str:
    """The installed package's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("sluice")
    except PackageNotFoundError:
        return "(development)"


@contextmanager
def embedded_broker(brokers: int = 1, port: int | None = None) -> Iterator[EmbeddedKafka]:
    """An embedded broker and its control socket (`kafka/topics.py`), closed on leaving."""
    from sluice.kafka.embedded import EmbeddedKafka
    from sluice.kafka.topics import ControlServer

    with EmbeddedKafka(brokers=brokers, port=port) as kafka:
        control = ControlServer(kafka.bootstrap, kafka.create_topic)
        try:
            yield kafka
        finally:
            control.close()


@contextmanager
def open_broker(address: str | None, *, embedded: bool) -> Iterator[str | None]:
    """The broker to use: `address` if given, else an embedded broker started here (and
    closed on leaving) if `embedded`, else None."""
    if address is not None or not embedded:
        yield address
        return
    with embedded_broker() as kafka:
        yield kafka.bootstrap


def connect(session: Session, broker: str) -> None:
    """Create the connection `kafka` to `broker` unless the catalog already has one. It is
    not validated: a broker named by `--broker` may start after the shell does, and a
    source's CREATE asks it for its topic anyway."""
    if CONNECTION_NAME not in session.names():
        session.execute(f"CREATE CONNECTION {CONNECTION_NAME} TO KAFKA (BROKER '{broker}') WITH (VALIDATE = false)")
