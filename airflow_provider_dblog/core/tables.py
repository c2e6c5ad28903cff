"""A source table as the pipeline sees it: columns and the key that identifies a row and orders chunks."""
from __future__ import annotations

from dataclasses import dataclass, replace


# fields only some sources set: left out of ``to_dict`` when unset, so other sources' plans do not change
_OPTIONAL = ("type_oid", "typmod", "ordinal", "order")


@dataclass(frozen=True)
class Column:
    name: str
    data_type: str          # the type's name, lower case: DATA_TYPE (MySQL), format_type (PostgreSQL)
    column_type: str        # the full declared type, e.g. "bigint(20) unsigned", "numeric(20,6)"
    nullable: bool = True
    charset: str | None = None
    collation: str | None = None
    precision: int | None = None
    scale: int | None = None
    char_length: int | None = None
    type_oid: int | None = None  # PostgreSQL: the column's (base) type OID: its values' and Arrow type's source
    typmod: int | None = None    # PostgreSQL: that type's modifier (numeric precision and scale, varchar length)
    ordinal: int | None = None   # PostgreSQL: its attnum, new when a column is dropped and added again (not in the WAL)
    order: str | None = None     # PostgreSQL: a key column's enum labels in their order (a hash): a rename moves keys

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type


DECLARED_ORDER = {"enum", "set"}  # MySQL types ordered by a value's place in the declared list, not its text


def _order_of(column: Column) -> str | None:
    order = column.column_type if column.data_type in DECLARED_ORDER else column.collation
    return f"{order or ''}|{column.order}" if column.order else order


@dataclass(frozen=True)
class TableMeta:
    """``key_columns`` identify a row and order chunks; ``key_source`` says where they came from."""

    database: str  # MySQL: the database; PostgreSQL: the schema (a capture is one database): ``qualified`` either way
    name: str
    columns: tuple[Column, ...]
    key_columns: tuple[str, ...]
    key_source: str  # primary | unique | chunk_key
    storage: str | None = None  # PostgreSQL: its files (relfilenodes, with its partitions'): new when it is rewritten

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    @property
    def key_order(self) -> tuple:
        """The key columns and what orders each (its collation; its declared list for a type ordered by a value's
        place in it, MySQL's ENUM and SET, or a PostgreSQL enum's labels; None for a type compared by value): the
        plan's chunk boundaries and the lake's key ranges hold only while it stays the same."""
        return tuple((name, _order_of(self.column(name))) for name in self.key_columns)

    def keeps_key_order(self, live: "TableMeta") -> bool:
        """Whether ``live`` (the table now) keys and orders its rows as this planned meta does. An order this meta
        did not record (``Column.order``: a plan made before it was recorded) is taken as kept, and compared from
        the table's next plan on."""
        if live.key_columns != self.key_columns:
            return False
        unrecorded = {n for n in self.key_columns if self.column(n).order is None}
        now = tuple((n, _order_of(replace(live.column(n), order=None) if n in unrecorded else live.column(n)))
                    for n in live.key_columns)
        return now == self.key_order

    @property
    def key_text(self) -> str:
        return ", ".join(f"{name} {collation}" if collation else name for name, collation in self.key_order) or "none"

    @property
    def chunk_key(self) -> tuple[str, ...] | None:
        """The ``--chunk-key`` the table was planned with (None: its own key), to describe it again the same way."""
        return self.key_columns if self.key_source == "chunk_key" else None

    @property
    def key_unique(self) -> bool:
        return self.key_source != "chunk_key"

    def with_identity_of(self, live: "TableMeta") -> "TableMeta":
        """These columns with the ordinals ``live`` gives the columns of the same name, and ``live``'s storage:
        the source's identities the lake now reflects, without taking ``live``'s columns or types."""
        ordinals = {c.name: c.ordinal for c in live.columns}
        columns = tuple(replace(c, ordinal=ordinals[c.name]) if ordinals.get(c.name, c.ordinal) != c.ordinal else c
                        for c in self.columns)
        storage = live.storage if live.storage is not None else self.storage
        if columns == self.columns and storage == self.storage:
            return self
        return replace(self, columns=columns, storage=storage)

    def to_dict(self) -> dict:
        return {"database": self.database, "name": self.name, "key_columns": list(self.key_columns),
                "key_source": self.key_source,
                "columns": [{k: v for k, v in vars(c).items() if v is not None or k not in _OPTIONAL}
                            for c in self.columns], **({"storage": self.storage} if self.storage is not None else {})}

    @classmethod
    def from_dict(cls, data: dict) -> "TableMeta":
        return cls(data["database"], data["name"], tuple(Column(**c) for c in data["columns"]),
                   tuple(data["key_columns"]), data["key_source"], data.get("storage"))
