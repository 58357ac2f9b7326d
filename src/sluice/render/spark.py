"""The one Spark session sluice uses: started lazily, only when data is needed.

Local by default (`local[2]`); `SLUICE_SPARK_MASTER` points it elsewhere. Spark's own
logging and console progress bars are kept out of user output, Python workers run the
interpreter sluice runs in (so they import sluice), and timestamps are UTC.
"""

from __future__ import annotations

import os
import sys
import threading

from pyspark.sql import SparkSession

from sluice.kafka.reader import KafkaDataSource

DEFAULT_MASTER = "local[2]"
_lock = threading.Lock()
_session: SparkSession | None = None


def spark() -> SparkSession:
    global _session
    with _lock:
        if _session is None:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
            session = (
                SparkSession.builder.master(os.environ.get("SLUICE_SPARK_MASTER", DEFAULT_MASTER))
                .appName("sluice")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.session.timeZone", "UTC")
                .config("spark.sql.shuffle.partitions", "4")
                .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=ERROR")
                .getOrCreate()
            )
            session.sparkContext.setLogLevel("ERROR")
            session.dataSource.register(KafkaDataSource)
            _session = session
        return _session
