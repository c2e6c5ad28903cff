"""The lake's Parquet files: which columns are dictionary-encoded, and that values survive the write."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_dblog.store.atomic import write_parquet
from airflow_provider_dblog.store.lake import snapshot_rows


def test_text_binary_and_dates_are_dictionary_encoded_numbers_are_not(tmp_path):
    source = pa.schema([("id", pa.int64()), ("price", pa.decimal128(15, 2)), ("flag", pa.string()),
                        ("raw", pa.binary()), ("day", pa.date32()), ("at", pa.timestamp("us"))])
    rows = pa.table([pa.array(range(1000)), pa.array([Decimal("1.25")] * 1000, pa.decimal128(15, 2)),
                     pa.array(["A", "R"] * 500), pa.array([b"\x00", b"\xff"] * 500),
                     pa.array([dt.date(2024, 1, 1)] * 1000), pa.array([dt.datetime(2024, 1, 1)] * 1000)],
                    schema=source)
    table = snapshot_rows(rows, "pos", 3, 0, source)
    path = tmp_path / "chunk.parquet"
    write_parquet(table, path)

    assert pq.read_table(path).equals(table)
    meta = pq.ParquetFile(path).metadata.row_group(0)
    dictionary = {meta.column(i).path_in_schema for i in range(meta.num_columns)
                  if meta.column(i).dictionary_page_offset is not None}
    assert {"flag", "raw", "day", "_op", "_pos", "_kind"} <= dictionary
    assert not dictionary & {"id", "price", "at", "_ts_ms", "_chunk"}


def test_building_a_chunk_file_does_not_import_pandas(tmp_path):
    """pyarrow imports pandas on its first conversion of Python values (≈0.5 s per Spark Python
    worker); a snapshot chunk is built and written without one."""
    code = f"""
import sys
import pyarrow as pa
from airflow_provider_dblog.store.atomic import write_parquet
from airflow_provider_dblog.store.lake import snapshot_rows
from pathlib import Path
source = pa.schema([("id", pa.int64()), ("name", pa.string())])
rows = pa.Table.from_arrays([pa.nulls(3, pa.int64()), pa.nulls(3, pa.string())], schema=source)
table = snapshot_rows(rows, "mysql-bin.000001:00000004", 2, 1700000000000, source)
write_parquet(table, Path({str(tmp_path / "c.parquet")!r}))
assert table.column("_pos").to_pylist() == ["mysql-bin.000001:00000004"] * 3, table
assert table.column("_chunk").to_pylist() == [2] * 3 and table.column("_ts_ms").to_pylist() == [1700000000000] * 3
print("pandas" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_change_events_keep_exact_values():
    """A change event's images become changelog rows with exact values (DECIMAL, dates, text)."""
    from airflow_provider_dblog.core.events import ChangeEvent
    from airflow_provider_dblog.core.positions import SourcePosition
    from airflow_provider_dblog.store.lake import event_rows

    source = pa.schema([("id", pa.int64()), ("price", pa.decimal128(15, 2)), ("day", pa.date32()), ("name", pa.string())])
    row = {"id": 7, "price": Decimal("-12.05"), "day": dt.date(2024, 2, 29), "name": "\u00e9t\u00e9"}
    before = {**row, "price": Decimal("1.00")}
    events = [ChangeEvent("db.t", "u", SourcePosition.at("mysql-bin.000002", 400), (7,), row, before, 1),
              ChangeEvent("db.t", "d", SourcePosition.at("mysql-bin.000002", 500), (7,), None, row, 2)]
    table = event_rows(events, [0, 0], source)
    assert table.select(source.names).to_pylist() == [row, row]  # a delete keeps its before image in place
    assert table.column("_op").to_pylist() == ["u", "d"] and table.column("_kind").to_pylist() == ["+U", "-D"]
    assert table.column("_before").to_pylist() == [before, row]
    assert table.column("_pos").to_pylist() == [e.pos.encode() for e in events]
