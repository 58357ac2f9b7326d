"""A session that creates an UPSERT source and a materialized view over it, waits until
the view has caught up, says `ready`, then keeps ingesting until it is killed
(tests/test_restart.py sends it SIGKILL)."""

import sys
import time

import sluice

data_dir, bootstrap = sys.argv[1:]
session = sluice.Session(data_dir)
session.execute_script(
    f"""
    CREATE CONNECTION kafka TO KAFKA (BROKER '{bootstrap}');
    CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 't') KEY FORMAT TEXT VALUE FORMAT JSON
      ENVELOPE UPSERT (VALUE DECODING ERRORS = INLINE);
    CREATE MATERIALIZED VIEW mv AS SELECT key, error, data FROM IGNORE ERRORS s;
    """
)
session.execute("SELECT count(*) FROM mv")
print("ready", flush=True)
while True:
    time.sleep(1)
