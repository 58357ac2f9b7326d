"""Planning is pure: no Spark, no Kafka client, no socket, however much is planned; and
EXPLAIN PYSPARK, which imports pyspark's Python modules, starts no Spark and opens no socket."""

import subprocess
import sys

NO_SOCKETS = r"""
import socket, sys

class NoSockets(socket.socket):
    def __init__(self, *args, **kwargs):
        raise AssertionError("planning opened a socket")

socket.socket = NoSockets
import sluice
"""

SCRIPT = NO_SOCKETS + r"""

session = sluice.Session(check_kafka=False)
session.execute_script('''
    CREATE CONNECTION kafka TO KAFKA (BROKER 'broker.invalid:9092');
    CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 't')
      KEY FORMAT TEXT VALUE FORMAT JSON INCLUDE PARTITION, OFFSET
      ENVELOPE UPSERT (VALUE DECODING ERRORS = (INLINE, PROPAGATE))
      WITH (REDIRECT ERRORS = dlq, TIMELINE = 'orders');
    CREATE MATERIALIZED VIEW mv AS SELECT key, count(*) FROM IGNORE ERRORS s GROUP BY key;
    CREATE SINK out FROM mv INTO KAFKA CONNECTION kafka (TOPIC 'o') KEY (key) FORMAT JSON ENVELOPE UPSERT;
    SHOW COLUMNS FROM s;
    EXPLAIN SELECT * FROM mv JOIN dlq ON true;
    EXPLAIN OPTIMIZED PLAN WITH (humanized expressions, reads) AS TEXT FOR MATERIALIZED VIEW mv;
''')
for sql in ["SELECT * FROM ONLY ERRORS s", "SUBSCRIBE mv", "SELECT count(*) FROM dlq"]:
    session.plan(sluice.parse_one(sql))
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j", "confluent_kafka"))
assert not loaded, loaded
print("ok")
"""


def test_planning_opens_no_socket_and_loads_no_spark_or_kafka() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


EXPLAIN_PYSPARK = NO_SOCKETS + r"""
from pyspark import SparkContext
session = sluice.Session(check_kafka=False)
session.execute_script('''
    CREATE CONNECTION kafka TO KAFKA (BROKER 'broker.invalid:9092');
    CREATE SOURCE s FROM KAFKA CONNECTION kafka (TOPIC 't') KEY FORMAT TEXT VALUE FORMAT JSON ENVELOPE UPSERT;
    CREATE TABLE t (a int);
''')
lines = session.execute("EXPLAIN PYSPARK FOR SELECT key, a FROM s JOIN t ON true").rows
assert SparkContext._gateway is None and SparkContext._active_spark_context is None
print(len(lines))
"""


def test_explain_pyspark_starts_no_spark_and_opens_no_socket() -> None:
    result = subprocess.run([sys.executable, "-c", EXPLAIN_PYSPARK], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) > 10
