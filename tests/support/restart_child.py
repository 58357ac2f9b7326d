"""A session on a data directory that creates the sources of tests/support/store_faults.py unless
its catalog has them, waits until their streams have caught up, says `ready`, then keeps
ingesting until it is killed (tests/support/store_faults.py `kill_rounds` sends it SIGKILL)."""

import sys
import time
from pathlib import Path

from tests.support.store_faults import open_session

data_dir, bootstrap = Path(sys.argv[1]), sys.argv[2]
session = open_session(data_dir, bootstrap, create=not (data_dir / "catalog.json").exists())
for relation in ("n", "mv"):  # both streams run and have caught up
    session.execute(f"SELECT count(*) FROM {relation}")
print("ready", flush=True)
while True:
    time.sleep(1)
