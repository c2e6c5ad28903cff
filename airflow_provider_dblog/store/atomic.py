"""The one atomic writer: a temp file beside the target, then one rename. Readers see the old file or
the new one, never a torn one; a killed step leaves at most a hidden temp file."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq


def write_atomic(path: Path, write: Callable[[str], None], mode: int | None = None) -> None:
    """Replace ``path`` with what ``write(temp_path)`` writes; ``mode``: the file's permissions."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        if mode is not None:
            os.chmod(tmp, mode)
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data, mode: int | None = None) -> None:
    def dump(tmp: str) -> None:
        with open(tmp, "w") as handle:
            json.dump(data, handle, indent=1, default=str)
    write_atomic(path, dump, mode)


def read_json(path: Path):
    return json.loads(Path(path).read_text())


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns worth dictionary-encoding: text, binary and dates often repeat (flags, codes,
    statuses, days) and are cheap to hash; numbers and timestamps rarely repeat, and hashing them
    took 40% of a chunk's write for 12% smaller files (TPC-H lineitem, benchmarks/analysis.md)."""
    wanted = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_date)
    return [f.name for f in schema if any(is_type(f.type) for is_type in wanted)]


def write_parquet(table: pa.Table, path: Path) -> None:
    write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression="snappy",
                                                  use_dictionary=dictionary_columns(table.schema)))
