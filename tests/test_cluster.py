"""sluice on a Spark master whose executors are JVMs and Python workers of their own
(`local-cluster`): its plans run there, and the shuffle partitions follow the cores the
master names."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.spark.session import _cores

CLUSTER_SLT = Path(__file__).with_name("cluster.slt")


@pytest.mark.parametrize(
    ("master", "cores"),
    [
        ("local", 1),
        ("local[3]", 3),
        ("local[4,2]", 4),
        ("local[*]", os.cpu_count()),
        ("local-cluster[2,1,1024]", 2),
        ("local-cluster[ 3 , 2 , 512 ]", 6),
        ("spark://host:7077", None),
        ("yarn", None),
        ("k8s://https://host:443", None),
    ],
)
def test_cores_are_those_the_master_url_names(master: str, cores: int | None) -> None:
    assert _cores(master) == cores


@pytest.mark.long
@pytest.mark.spark  # its child starts Java
@pytest.mark.parametrize("data_uri", [False, True], ids=["data directory", "data URI"])
def test_a_sqllogic_file_passes_on_separate_executor_processes(tmp_path: Path, data_uri: bool) -> None:
    # A child process: the suite's own Spark session (local) stays as it is. Executors of
    # one core each on a loaded machine start an UPSERT source's first micro-batch in
    # minutes, so the catch-up waits as long as the file's kafka-verify does.
    env = {
        **os.environ,
        "SLUICE_SPARK_MASTER": "local-cluster[2,1,1024]",
        "SLUICE_CATCH_UP_TIMEOUT": "600",
    }
    if data_uri:  # the data through Hadoop's filesystem, which executors and driver share
        env["SLUICE_DATA_URI"] = f"file://{tmp_path}/data"
    done = subprocess.run(
        [sys.executable, "-m", "sluice", "test", str(CLUSTER_SLT)],
        env=env, capture_output=True, text=True, timeout=1500,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].endswith(" passed, 0 failed"), done.stdout
    if data_uri:  # the file's session kept its data there, and removed it as it closed
        assert (tmp_path / "data").is_dir() and not any((tmp_path / "data").iterdir())
