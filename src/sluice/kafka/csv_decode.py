"""The CSV decoder: one record per message, read as Materialize reads it."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from sluice.kafka.decode import DecodeFailure, Decoder, decode_each


@dataclass
class CsvDecoder(Decoder):
    """One record per message; the record number in errors is the offset + 1."""

    column_count: int
    delimiter: str = ","

    @property
    def arrow_type(self) -> pa.DataType:
        return pa.list_(pa.string())

    def decode(self, payloads: Sequence[bytes | None], offsets: Sequence[int]) -> tuple[list, list]:
        return decode_each(payloads, lambda payload, i: self._one(payload, offsets[i] + 1))

    def _one(self, payload: bytes, record: int) -> list[str]:
        # Python's CSV reader refuses a field past a process-wide limit (128 KiB unless
        # raised); Materialize's has none, and no field is longer than its message.
        if len(payload) > csv.field_size_limit():
            csv.field_size_limit(len(payload))
        try:
            text = payload.decode("utf-8")
            rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=self.delimiter))
        except (UnicodeDecodeError, csv.Error) as e:
            raise DecodeFailure(f"CSV error at record number {record}: {e}") from None
        fields = rows[0] if rows else []
        if len(rows) > 1 or len(fields) != self.column_count:
            got = sum(len(r) for r in rows)
            raise DecodeFailure(
                f"CSV error at record number {record}: expected {self.column_count} columns, got {got}."
            )
        return fields
