"""The lake's Parquet files: which columns are dictionary-encoded, and that values survive the write."""
from __future__ import annotations

import datetime as dt
import subprocess
import sys
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_provider_dblog.lake import snapshot_rows, write_atomic


def test_text_binary_and_dates_are_dictionary_encoded_numbers_are_not(tmp_path):
    source = pa.schema([("id", pa.int64()), ("price", pa.decimal128(15, 2)), ("flag", pa.string()),
                        ("raw", pa.binary()), ("day", pa.date32()), ("at", pa.timestamp("us"))])
    rows = pa.table([pa.array(range(1000)), pa.array([Decimal("1.25")] * 1000, pa.decimal128(15, 2)),
                     pa.array(["A", "R"] * 500), pa.array([b"\x00", b"\xff"] * 500),
                     pa.array([dt.date(2024, 1, 1)] * 1000), pa.array([dt.datetime(2024, 1, 1)] * 1000)],
                    schema=source)
    table = snapshot_rows(rows, "pos", 3, 0, source)
    path = tmp_path / "chunk.parquet"
    write_atomic(table, path)

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
from airflow_provider_dblog.lake import snapshot_rows, write_atomic
from pathlib import Path
source = pa.schema([("id", pa.int64()), ("name", pa.string())])
rows = pa.Table.from_arrays([pa.nulls(3, pa.int64()), pa.nulls(3, pa.string())], schema=source)
table = snapshot_rows(rows, "mysql-bin.000001:00000004", 2, 1700000000000, source)
write_atomic(table, Path({str(tmp_path / "c.parquet")!r}))
assert table.column("_pos").to_pylist() == ["mysql-bin.000001:00000004"] * 3, table
assert table.column("_chunk").to_pylist() == [2] * 3 and table.column("_ts_ms").to_pylist() == [1700000000000] * 3
print("pandas" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_change_events_and_merged_rows_convert_without_importing_pandas():
    """Arrow's converter of Python values imports pandas on its first call (≈0.2-0.5 s of CPU in each
    process that merges a window or writes change events); inside ``python_values_to_arrow`` it
    does not, the values are exact, and pandas still imports normally afterwards."""
    code = """
import sys, datetime as dt
from decimal import Decimal
import pyarrow as pa
from airflow_provider_dblog.core.events import ChangeEvent
from airflow_provider_dblog.core.positions import BinlogPosition
from airflow_provider_dblog.lake import event_rows, python_values_to_arrow
source = pa.schema([("id", pa.int64()), ("price", pa.decimal128(15, 2)), ("day", pa.date32()), ("name", pa.string())])
row = {"id": 7, "price": Decimal("-12.05"), "day": dt.date(2024, 2, 29), "name": "\u00e9t\u00e9"}
events = [ChangeEvent("db.t", "c", BinlogPosition.at("mysql-bin.000002", 400), (7,), row, None, 1)]
table = event_rows(events, [0], source)
with python_values_to_arrow():
    merged = pa.Table.from_pylist([row], schema=source)
assert "pandas" not in sys.modules
assert table.select(source.names).to_pylist() == [row] == merged.to_pylist(), table
import pandas
assert merged.to_pandas().shape == (1, 4)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
