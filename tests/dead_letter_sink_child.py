"""A session on a data directory that creates the source and dead-letter sink of
tests/test_dead_letter_sink.py unless its catalog has them, waits until the source has
caught up, says `ready`, then keeps ingesting and sinking until it is killed
(tests/store_faults.py `kill_rounds` sends it SIGKILL)."""

import sys
import time
from pathlib import Path

from tests.test_dead_letter_sink import open_session

data_dir, bootstrap = Path(sys.argv[1]), sys.argv[2]
session = open_session(data_dir, bootstrap)
session.execute("SELECT count(*) FROM dlq")  # the stream runs and has caught up
print("ready", flush=True)
while True:
    time.sleep(1)
