"""The lake's column algebra: which of a lake table's columns are the source's, how the columns change when
the source's do (merged, widened, renamed), and rows brought into a set of columns. Pure functions of Arrow
schemas and tables; ``lake_tables`` commits what they compute."""
from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import SourcePosition
from airflow_provider_dblog.store.lake import UNCHANGED, current_schema

METADATA = ("_op", "_pos", "_ts_ms", "_chunk")
# every column the lake adds to a source's: ``current``'s, the changelog's two more, a change's transient one
LAKE_COLUMNS = (*METADATA, "_kind", "_before", UNCHANGED)
# columns the tail's merges add next to a table's (lake_tables' MERGE source) and next to its key columns (lake_merge,
# lake_tables' key probes): a source column of the same name would be two columns there
WORKING_COLUMNS = ("_chunk_hw",)
KEY_WORKING_COLUMNS = ("_held", "_i", "_j")


def clashing_columns(columns: Sequence[str], key_columns: Sequence[str]) -> list[str]:
    """The columns of a source table whose names the lake takes for its own, compared without case as Delta
    compares names: refused when the table is planned, since every write of the table would fail on them."""
    taken = {n.lower() for n in (*LAKE_COLUMNS, *WORKING_COLUMNS)}
    key_taken = taken | set(KEY_WORKING_COLUMNS)
    return [c for c in columns if c.lower() in (key_taken if c in key_columns else taken)]


def case_twin_columns(columns: Sequence[str]) -> list[str]:
    """The columns whose names differ only in case from another's (PostgreSQL's "A" and "a"): Delta compares names
    without case, so no write of the table could hold both (delta-rs: "Duplicate field name")."""
    lowered = [c.lower() for c in columns]
    return [c for c in columns if lowered.count(c.lower()) > 1]


def changed_columns(data: pa.Table, source: pa.Schema, at: SourcePosition, renamed: dict, defaults: dict
                    ) -> pa.Table:
    """``current``'s rows in the source's new columns: ``renamed`` (new name -> old) carried over, dropped ones
    removed, types cast, added ones null or, for rows from before ``at``, their ``defaults``."""
    kept = set(data.column_names) | set(renamed)  # added columns stay nullable: rows before it may lack values
    target = current_schema(pa.schema([f if f.name in kept else f.with_nullable(True) for f in source]))
    data = data.rename_columns([next((new for new, old in renamed.items() if old == n), n) for n in data.column_names])
    data = conform(data, target)
    before = pc.less_equal(data["_pos"], at.as_snapshot().encode())
    for name, value in defaults.items():
        if value is not None and data.num_rows:
            filled = pc.if_else(before, pa.scalar(value.as_py(), target.field(name).type), data[name])
            data = data.set_column(data.schema.get_field_index(name), target.field(name), filled)
    return data


def same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    """Same column names and types, in order (nullability aside: a lake's and a source's may differ)."""
    return a.names == b.names and a.types == b.types


def same_column_set(a: pa.Schema, b: pa.Schema) -> bool:
    """Same column names and types, whatever their order: a Delta table keeps its columns' order when the source
    moves one (PostgreSQL: a column dropped and added again comes last), and rows are written by name."""
    return len(a) == len(b) and dict(zip(a.names, a.types)) == dict(zip(b.names, b.types))


def source_columns(schema: pa.Schema) -> pa.Schema:
    """The source's columns of a lake schema (without the ``_``-prefixed metadata)."""
    return pa.schema([f for f in schema if f.name not in LAKE_COLUMNS])


def column_names(table) -> set[str]:
    return {f.name for f in table.schema().fields}


def delta_schema(table) -> pa.Schema:
    """A Delta table's schema as pyarrow's (large types as the lake writes them)."""
    return plain(pa.schema(table.schema().to_arrow()))


def plain(schema: pa.Schema) -> pa.Schema:
    def plain_type(t: pa.DataType) -> pa.DataType:
        if pa.types.is_large_string(t) or pa.types.is_string_view(t):
            return pa.string()
        if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
            return pa.binary()
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, plain_type(f.type), f.nullable) for f in t])
        return t
    return pa.schema([pa.field(f.name, plain_type(f.type), f.nullable) for f in schema])


def merge_schemas(old: pa.Schema, new: pa.Schema) -> pa.Schema:
    """Every column of both; a column whose type changed takes the new type if every old value fits it
    (a widening), the old one if every new value fits it (rows decoded before a widening arrive after
    it), else text."""
    fields = {f.name: f for f in old}
    for f in new:
        prior = fields.get(f.name)
        if prior is None or prior.type == f.type:
            fields[f.name] = f if prior is None else prior
        elif pa.types.is_struct(prior.type) and pa.types.is_struct(f.type):
            fields[f.name] = pa.field(f.name, pa.struct(list(merge_schemas(pa.schema(list(prior.type)),
                                                                          pa.schema(list(f.type))))))
        else:
            fields[f.name] = pa.field(f.name, f.type if widens(prior.type, f.type) else
                                      prior.type if widens(f.type, prior.type) else pa.string())
    return pa.schema([pa.field(f.name, f.type, True) for f in fields.values()])


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` is a value of ``new`` (a type the lake can change in place)."""
    if pa.types.is_integer(old) and pa.types.is_integer(new):
        return new.bit_width >= old.bit_width and (pa.types.is_signed_integer(new)
                                                   or not pa.types.is_signed_integer(old))
    if pa.types.is_decimal(old) and pa.types.is_decimal(new):
        return new.scale >= old.scale and new.precision - new.scale >= old.precision - old.scale
    if pa.types.is_integer(old) and pa.types.is_decimal(new):
        return True
    if pa.types.is_floating(old) and pa.types.is_floating(new):
        return new.bit_width >= old.bit_width
    return pa.types.is_string(new) or (pa.types.is_binary(old) and pa.types.is_binary(new))


def conform(rows: pa.Table, schema: pa.Schema, kept_by: str | None = None) -> pa.Table:
    """``rows`` in ``schema``: missing columns null, extra ones dropped, other types cast (a value that
    does not fit becomes null: only where every chunk is read again afterwards). ``kept_by``: the table
    whose lake keeps its columns (``--schema-changes freeze``), where nothing reads the chunks again: a
    value the lake's type cannot hold exactly stops in one line naming the column instead."""
    n = rows.num_rows
    return pa.Table.from_arrays([_conform_column(rows.column(f.name) if f.name in rows.schema.names else None, f, n,
                                                 kept_by) for f in schema], schema=schema)


def _conform_column(column, field: pa.Field, n: int, kept_by: str | None = None):
    if column is None:
        return pa.nulls(n, field.type)
    if column.type == field.type:
        return column
    if pa.types.is_struct(field.type) and pa.types.is_struct(column.type):
        flat = pa.Table.from_arrays(column.combine_chunks().flatten(), names=[f.name for f in column.type])
        parts = conform(flat, pa.schema(list(field.type)), kept_by)
        valid = pc.is_valid(column)
        struct = pa.StructArray.from_arrays([c.combine_chunks() for c in parts.columns], fields=list(field.type),
                                            mask=pc.invert(valid).combine_chunks() if n else None)
        return struct
    if kept_by is not None:
        return _cast_exactly(column, field, kept_by)
    try:
        return column.cast(field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if pa.types.is_string(field.type):
            if pa.types.is_binary(column.type):
                return pa.nulls(n, field.type)
            return pc.cast(column, pa.string(), safe=False)
        return pa.nulls(n, field.type)


def _cast_exactly(column, field: pa.Field, table: str):
    """``column`` cast to ``field``'s type when every value comes back the same (no overflow, no lost digits or
    precision, text that is text), else the one line that says the kept type cannot hold it."""
    try:
        cast = column.cast(field.type)
        same = pc.equal(cast.cast(column.type), column)
        if pa.types.is_floating(column.type):
            same = pc.or_kleene(same, pc.and_(pc.is_nan(cast.cast(column.type)), pc.is_nan(column)))
        exact = pc.all(pc.fill_null(same, True)).as_py() is not False
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        exact = False
    if not exact:
        raise DblogError(f"{table}: a value of column {field.name} (the source's type is now {column.type}) does not "
                         f"fit the lake's {field.type}, kept by --schema-changes freeze: restart with "
                         f"--schema-changes evolve to follow the type change (the lake holds every change before it)")
    return cast


def row_bytes(schema: pa.Schema) -> int:
    """About how many bytes one row of ``schema`` takes in Arrow (variable-width values counted at 32)."""
    def width(t: pa.DataType) -> int:
        if pa.types.is_struct(t):
            return sum(width(f.type) for f in t)
        try:
            return max(1, t.bit_width // 8)
        except ValueError:
            return 32
    return sum(width(f.type) for f in schema) + 1
