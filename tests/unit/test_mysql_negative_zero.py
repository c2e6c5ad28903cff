"""MariaDB's SELECT (hence the snapshot) shows a stored FLOAT -0 as 0 while its binlog keeps -0: on MariaDB every
binlog path (the compiled per-row decoder, the library's values, the block decoder) reads FLOAT/DOUBLE -0 as 0.0,
so a later change of a -0 row is not another key in the lake. MySQL's values stay as logged. The real server is
``tests/integration/test_float_key_changes.py``."""
from __future__ import annotations

import struct
from types import SimpleNamespace

import numpy as np
import pytest

from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source import spans
from airflow_provider_dblog.source.mysql import block_decoder as bd
from airflow_provider_dblog.source.mysql import rows
from airflow_provider_dblog.source.mysql.field_types import DOUBLE, FLOAT, LONG

META = TableMeta("d", "t", (Column("f", "float", "float"), Column("g", "double", "double"), Column("i", "int", "int")),
                 ("f",), "primary")
TABLE_MAP = [SimpleNamespace(name="f", type=FLOAT, unsigned=False), SimpleNamespace(name="g", type=DOUBLE,
             unsigned=False), SimpleNamespace(name="i", type=LONG, unsigned=False)]
VALUES = [-0.0, 0.0, -1.5, float("nan")]
MARIADB = pytest.mark.parametrize("mariadb", [True, False], ids=["mariadb", "mysql"])


def bits(value: float) -> bytes:
    return struct.pack("<d", value)


def want(value: float, mariadb: bool) -> bytes:
    """What the lake must hold: -0.0 as 0.0 on MariaDB (its SELECT), else the logged bits."""
    return bits(0.0) if mariadb and bits(value) == bits(-0.0) else bits(value)


@MARIADB
def test_the_compiled_row_decoder_reads_negative_zero_as_select_shows_it(mariadb):
    """A row image of -0 (FLOAT and DOUBLE) decodes to 0.0 on MariaDB only; other values keep their bits."""
    decode = rows.compile_row_decoder(TABLE_MAP, META, mariadb)
    for value in VALUES:
        row, _ = decode(b"\0" + struct.pack("<f", value) + struct.pack("<d", value) + struct.pack("<i", 0), 0)
        assert (bits(row["f"]), bits(row["g"]), row["i"]) == (want(value, mariadb), want(value, mariadb), 0)


@MARIADB
def test_the_librarys_values_read_negative_zero_as_select_shows_it(mariadb):
    """Where no decoder compiles, the library's -0.0 goes through the same rule (its converter after the dblog's)."""
    images = rows.RowImages({META.qualified: META}, lambda meta: lambda values: values, mariadb)
    convert = images.converter(META)
    for value in VALUES:
        row = convert({"f": value, "g": value, "i": 0})
        assert (bits(row["f"]), bits(row["g"]), row["i"]) == (want(value, mariadb), want(value, mariadb), 0)
    assert convert({"f": None, "g": None, "i": None}) == {"f": None, "g": None, "i": None} and convert(None) is None


@MARIADB
@pytest.mark.parametrize("tm", TABLE_MAP[:2], ids=["float", "double"])
def test_the_block_decoder_reads_negative_zero_as_select_shows_it(mariadb, tm):
    """A block's FLOAT/DOUBLE spans of -0 become 0.0 on MariaDB only, as the per-row decoder's."""
    width = 4 if tm.type == FLOAT else 8
    raw = b"".join(struct.pack("<f" if width == 4 else "<d", v) for v in VALUES)
    data = np.frombuffer(raw + bytes(spans.PAD), np.uint8)
    starts = np.arange(len(VALUES), dtype=np.int64) * width
    spec = bd.block_layout([tm], TableMeta("d", "t", (META.column(tm.name),), (tm.name,), "primary"), mariadb)[0]
    got = spec.convert(data, starts, np.full(len(VALUES), width), np.ones(len(VALUES), bool)).to_pylist()
    assert [bits(v) for v in got] == [want(v, mariadb) for v in VALUES]
