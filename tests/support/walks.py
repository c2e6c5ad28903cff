"""What the seeded random walks (tests/e2e/*random*) share."""
from __future__ import annotations


def follow_added_columns(added: list[str], clause: str, text: str, picked: str, n: int) -> None:
    """``added`` (the columns a walk's DDL added, in order) after ``ALTER TABLE ... text``, made from ``clause``
    (ADD COLUMN NAME ..., DROP COLUMN {added}, RENAME COLUMN {added} TO r{n}) with ``picked`` as ``{added}``."""
    if clause.startswith("ADD"):
        added.append(text.split()[2])
    elif clause.startswith("DROP"):
        added.remove(picked)
    elif clause.startswith("RENAME"):
        added[added.index(picked)] = f"r{n}"
