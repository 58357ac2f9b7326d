"""A session on a data directory whose sink drains the source `src` (ENVELOPE NONE, TEXT)
into the topic `out`, creating both unless its catalog has them; once the sink has
delivered what the topic held it says `ready`, then keeps sinking until it is killed
(tests/test_sink_restart.py sends it SIGKILL)."""

import sys
import time
from pathlib import Path

import sluice

data_dir, bootstrap = Path(sys.argv[1]), sys.argv[2]
session = sluice.Session(data_dir)  # a sink in its catalog starts with it
if session.catalog.current.get("s") is None:
    session.execute_script(
        f"""
        CREATE CONNECTION kafka TO KAFKA (BROKER '{bootstrap}');
        CREATE SOURCE src FROM KAFKA CONNECTION kafka (TOPIC 'in') FORMAT TEXT;
        CREATE SINK s FROM src INTO KAFKA CONNECTION kafka (TOPIC 'out') KEY (text) NOT ENFORCED FORMAT JSON ENVELOPE UPSERT;
        """
    )
session.drain_sinks(600)
print("ready", flush=True)
while True:
    time.sleep(1)
