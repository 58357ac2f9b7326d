"""INSERT, UPDATE and DELETE on tables carried out: a write plan's rows computed on Spark
(or, for plain literals, taken as planned) and stored by `TableStore` in one atomic
replacement of the table's file.
"""

from __future__ import annotations

from pyspark.sql import Column as SparkColumn
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sluice.catalog.items import Item
from sluice.catalog.store import Catalog
from sluice.catalog.types import Column
from sluice.errors import InternalError, NotNullViolation
from sluice.plan.plans import WritePlan
from sluice.render.query import QueryRenderer
from sluice.render.types import spark_type
from sluice.storage.tables import TableStore


def execute_write(plan: WritePlan, catalog: Catalog, store: TableStore, renderer: QueryRenderer) -> str:
    """Carry out the write; the command tag (`INSERT 0 n`, `UPDATE n`, `DELETE n`)."""
    item = catalog.by_id(plan.table_id)
    matched = None if plan.matched is None else renderer.collect(plan.matched)[0][0]
    if plan.literal_rows is not None:
        rows = list(plan.literal_rows)
    elif plan.rows is not None:
        rows = renderer.collect(
            plan.rows, lambda frame: [_stored(frame, name, c) for name, c in zip(frame.columns, item.columns)]
        )
    else:  # the planner gives a write its rows, as a query or as literals
        raise InternalError.bug(f'a {plan.status} of "{item.name}" with no rows planned')
    _check_not_null(item, rows)
    if plan.status == "INSERT":
        store.write(item, store.read(item) + rows)
        return f"INSERT 0 {len(rows)}"
    store.write(item, rows)
    return f"{plan.status} {matched}"


def _stored(frame: DataFrame, name: str, column: Column) -> SparkColumn:
    """A result column as the table stores it (a jsonb VARIANT as its JSON text)."""
    value = F.col(f"`{name}`")
    if isinstance(frame.schema[name].dataType, T.VariantType):
        return F.to_json(value)
    return value.cast(spark_type(column.type))


def _check_not_null(item: Item, rows: list[tuple]) -> None:
    for index, column in enumerate(item.columns):
        if not column.nullable and any(row[index] is None for row in rows):
            raise NotNullViolation(
                f'null value in column "{column.name}" of relation "{item.name}" violates '
                "not-null constraint"
            )
