"""Materialize type names → Spark SQL types, for tables sluice stores itself."""

from __future__ import annotations

from pyspark.sql import types as T

from sluice.catalog.types import Column, SqlType
from sluice.errors import FeatureNotSupported

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
