"""A session on a data directory that creates the source and dead-letter sink of
tests/support/dead_letters.py unless its catalog has them, waits until the source has
caught up and its sink has delivered what it read, says `ready`, then keeps ingesting
and sinking until it is killed (tests/support/store_faults.py `kill_rounds` sends it SIGKILL).

With a third argument N it kills itself (SIGKILL) instead, in the middle of a step's
transaction: once the step has written N messages and the broker has acknowledged them."""

import os
import signal
import sys
import time
from pathlib import Path

from sluice.errors import SourceFailed
from sluice.storage.sink.delivery import Delivery
from tests.support.dead_letters import open_session

data_dir, bootstrap = Path(sys.argv[1]), sys.argv[2]
if len(sys.argv) > 3:
    kill_after, produce_one, written = int(sys.argv[3]), Delivery._produce, []

    def produce_then_die(delivery, topic, message, on_delivery):
        produce_one(delivery, topic, message, on_delivery)
        written.append(1)
        if len(written) == kill_after:
            delivery.producer.flush(30)
            os.kill(os.getpid(), signal.SIGKILL)

    Delivery._produce = produce_then_die
session = open_session(data_dir, bootstrap)
deadline = time.monotonic() + 300
while True:  # the stream runs and has caught up
    try:
        session.execute("SELECT count(*) FROM dlq")
        break
    except SourceFailed:  # a stream that failed to start (a loaded machine) restarts by itself
        if time.monotonic() > deadline:
            raise
        time.sleep(1)
session.drain_sinks(600)
print("ready", flush=True)
while True:
    time.sleep(1)
