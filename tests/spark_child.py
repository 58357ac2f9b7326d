"""A sluice session in a process of its own, for tests of how sluice starts and runs its
Spark session (tests/test_spark_session.py). Connected to the Kafka broker at
`$SLUICE_TEST_BROKER` (as `kafka`), with Spark's web UI on and the `--conf` pairs of
`$SLUICE_TEST_CONF` (`key=value;…`), it reads a statement a line from stdin and prints
each result's rows, or its error, as one JSON line; the line `INFO` prints the web UI's
address, the JVM's process id and Spark's log file instead. It ends at the end of stdin."""

import json
import os
import sys
import tempfile

import sluice
from sluice.errors import SqlError
from sluice.spark.session import spark, spark_log_path

conf = [tuple(pair.split("=", 1)) for pair in os.environ.get("SLUICE_TEST_CONF", "").split(";") if pair]
with tempfile.TemporaryDirectory() as data, sluice.Session(data, spark_conf=conf, spark_ui=True) as session:
    session.execute(f"CREATE CONNECTION kafka TO KAFKA (BROKER '{os.environ['SLUICE_TEST_BROKER']}')")
    for line in sys.stdin:
        if line.strip() == "INFO":
            jvm = spark().sparkContext._jvm.java.lang.ProcessHandle.current().pid()
            print(json.dumps({"ui": session.spark_ui(), "jvm": jvm, "log": str(spark_log_path())}), flush=True)
            continue
        try:
            print(json.dumps({"rows": session.execute(line).rows}, default=str), flush=True)
        except SqlError as e:
            print(json.dumps({"error": e.message, "code": e.code}), flush=True)
