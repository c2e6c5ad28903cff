"""pgoutput's raw text values typed one column at a time by ``values.converter`` (the one definition of each
type's meaning): the reference the generated decoder (``row_decoder``) is compared with, and how tests read the
tuples of decoded messages."""
from __future__ import annotations

from typing import Any, Sequence

from airflow_provider_dblog.source.postgres.pgoutput import UNCHANGED_TOAST
from airflow_provider_dblog.source.postgres.values import converter


def typed_values(types: Sequence[tuple[int, int]], raw: Sequence[Any]) -> tuple:
    """``raw`` (text values, ``None``, ``UNCHANGED_TOAST``) typed by ``types`` ((type OID, typmod) per column);
    NULL and unchanged TOASTed values pass through."""
    if len(types) != len(raw):
        raise ValueError(f"{len(raw)} values for {len(types)} columns: the Relation is out of date")
    return tuple(v if v is None or v is UNCHANGED_TOAST else converter(oid, typmod)(v)
                 for (oid, typmod), v in zip(types, raw))
