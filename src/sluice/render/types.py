"""Materialize type names → Spark SQL types, tables' rows as a Spark DataFrame, and a
frame's timestamps as the wall clock Python is given when it collects one."""

from __future__ import annotations

import functools

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from sluice.catalog.types import Column, SqlType
from sluice.errors import FeatureNotSupported
from sluice.spark.pyspark_code import F
from sluice.storage.tables import rows_of

_SCALARS = {
    "integer": T.IntegerType(),
    "smallint": T.ShortType(),
    "bigint": T.LongType(),
    "real": T.FloatType(),
    "double precision": T.DoubleType(),
    "numeric": T.DecimalType(38, 10),
    "boolean": T.BooleanType(),
    "text": T.StringType(),
    "character varying": T.StringType(),
    "character": T.StringType(),
    "uuid": T.StringType(),
    "jsonb": T.StringType(),
    "bytea": T.BinaryType(),
    "date": T.DateType(),
    "timestamp": T.TimestampType(),
    "timestamp with time zone": T.TimestampType(),
    "mz_timestamp": T.LongType(),
}


def spark_type(sql_type: SqlType) -> T.DataType:
    if sql_type.name == "array" and sql_type.element is not None:
        return T.ArrayType(spark_type(sql_type.element))
    found = _SCALARS.get(sql_type.name)
    if found is None:
        raise FeatureNotSupported(f"tables with {sql_type.display()} columns are not supported yet")
    return found


def spark_schema(columns: tuple[Column, ...]) -> T.StructType:
    return T.StructType([T.StructField(c.name, spark_type(c.type), c.nullable) for c in columns])


def stored_table_frame(spark: SparkSession, columns: tuple[Column, ...], text: str) -> DataFrame:
    """The `table_frame` of a table's stored `text` (`TableStore.text`). A session's query
    over rows read before reuses their frame: made through Arrow and the JVM, a frame
    costs ~10 ms, and a query of a sqllogictest corpus refers to tens of tables. (A
    recording, for EXPLAIN PYSPARK, writes out every reference.)"""
    if not isinstance(spark, SparkSession):
        return table_frame(spark, rows_of(columns, text), columns)
    return _session_table_frame(spark, columns, text)


@functools.lru_cache(maxsize=64)
def _session_table_frame(spark: SparkSession, columns: tuple[Column, ...], text: str) -> DataFrame:
    return table_frame(spark, rows_of(columns, text), columns)


def table_frame(spark: SparkSession, rows: list[tuple], columns: tuple[Column, ...]) -> DataFrame:
    """A table's rows as a local relation: given through Arrow, Spark knows their size and
    broadcasts a small table into a join, where rows given as Python objects would be an
    RDD of unknown size, shuffled (a 56-way join of ten-row tables: 110 shuffles)."""
    schema = spark_schema(columns)
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    values: list[tuple] = list(zip(*rows)) if rows else [() for _ in columns]
    table = pa.Table.from_arrays(
        [pa.array(list(v), type=f.type) for v, f in zip(values, arrow_schema, strict=True)], schema=arrow_schema
    )
    return spark.createDataFrame(table, schema)


def _wall_clock_type(data_type: T.DataType) -> T.DataType:
    """`data_type` with every timestamp, however deeply nested, one without time zone."""
    if isinstance(data_type, T.TimestampType):
        return T.TimestampNTZType()
    if isinstance(data_type, T.StructType):
        return T.StructType([T.StructField(f.name, _wall_clock_type(f.dataType), f.nullable) for f in data_type])
    if isinstance(data_type, T.ArrayType):
        return T.ArrayType(_wall_clock_type(data_type.elementType), data_type.containsNull)
    if isinstance(data_type, T.MapType):
        return T.MapType(
            _wall_clock_type(data_type.keyType), _wall_clock_type(data_type.valueType), data_type.valueContainsNull
        )
    return data_type


def wall_clock_frame(frame: DataFrame) -> DataFrame:
    """`frame` with its timestamps as their wall clock in the session's time zone (UTC),
    column by column in place. PySpark gives a collected timestamp in the Python
    process's local time zone, through a conversion that fails for the first day of year
    1 ("year 0 is out of range"); a timestamp without time zone it gives as it is."""
    fields = frame.schema.fields
    wanted = [_wall_clock_type(f.dataType) for f in fields]
    if wanted == [f.dataType for f in fields]:
        return frame
    positional = [f"_{i}" for i in range(len(fields))]  # a query's columns may share a name
    return frame.toDF(*positional).select(
        *(F.col(name).cast(t) if t != f.dataType else F.col(name) for name, t, f in zip(positional, wanted, fields))
    )
