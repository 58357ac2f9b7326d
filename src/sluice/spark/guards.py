"""A query's guard failing its Spark job, and which guard it was: the text sluice itself
raises inside a job it plans (Spark's `raise_error`), written and read here.

A query whose errs must be checked in its own job (`render.query`) unions to its rows
the rows of those errs, each raising `sluice guard failed: run <n>: <message>` (`raising`)
where n numbers the query's runs that checked errs in their job. Spark fails the job with
its condition `USER_RAISED_EXCEPTION`, the text as the parameter `errorMessage`, from
which `failed_run` reads n back — the query then names the run's first error by a second
job (errors are the rare path). The `<message>` is only for a reader of Spark's log.
"""

from __future__ import annotations

from pyspark.sql import Column

from sluice.spark.conditions import condition, parameters
from sluice.spark.pyspark_code import F

_GUARD = "sluice guard failed: run "


def raising(message: Column, run: int) -> Column:
    """NULL where `message` is NULL; where it is not, the failure of the job by run `run`'s
    guard. Raised only for a message: Spark may move a guard's filters past one another
    (and one reading no column below a join, raising on every row of one side)."""
    return F.when(message.isNotNull(), F.raise_error(F.concat(F.lit(f"{_GUARD}{run}: "), message)))


def failed_run(failure: BaseException) -> int | None:
    """The run whose guard failed the job `failure` failed, None for any other failure."""
    if condition(failure) != "USER_RAISED_EXCEPTION":
        return None
    marker = parameters(failure).get("errorMessage", "")
    if not marker.startswith(_GUARD):
        return None
    return int(marker.removeprefix(_GUARD).split(":", 1)[0])
