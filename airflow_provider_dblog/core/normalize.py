"""The watermark window merge ("normalize") of DBLog / Flink CDC.

A chunk's SELECT ran at some read view between the low (LW) and the high (HW) watermark. Every
key the window's events touched ends in the state its *last* event in the window left (an
after-image, or gone for a delete), whatever the SELECT saw; every untouched key is as the SELECT
saw it, which is its state at HW too. So the merge yields the chunk's exact rows at HW.
"""
from __future__ import annotations

from typing import Callable, Iterable

from airflow_provider_dblog.core.events import ChangeEvent, Key, Row


def last_images(events: Iterable[ChangeEvent], in_chunk: Callable[[Key], bool]) -> dict[Key, Row | None]:
    """For each in-chunk key the window touched: its final after-image, or None if deleted."""
    final: dict[Key, Row | None] = {}
    for event in sorted(events, key=lambda e: e.pos):
        if in_chunk(event.key):
            final[event.key] = event.after
    return final


def merge_window(selected: Iterable[tuple[Key, Row]], touched: dict[Key, Row | None]) -> list[Row]:
    """Rows at HW: selected rows of untouched keys, plus the surviving touched keys' images."""
    rows = [row for key, row in selected if key not in touched]
    rows.extend(row for row in touched.values() if row is not None)
    return rows
