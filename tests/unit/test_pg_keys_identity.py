"""``schema.key_problem`` and ``schema.chosen_key``: when a PostgreSQL table's key still identifies its rows (pure
functions over what the catalog says; the real server's cases are in
``tests/integration/test_postgres_changes_outside_the_wal.py``)."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.postgres.schema import KEY_IDENTITY, UniqueKey, chosen_key, key_identity, key_problem

COLUMNS = ("id", "region", "v")


def meta(key=("id",), source="primary", index: str | None = "c500") -> TableMeta:
    storage = "16400|16400:16400" + (f"|{KEY_IDENTITY}{index}" if index is not None else "")
    return TableMeta("public", "acct", tuple(Column(c, "integer", "integer", c == "v") for c in COLUMNS), key,
                     source, storage)


NOT_NULL = {"id": True, "region": True, "v": False}
PK = UniqueKey("acct_pkey", "c500", True, ("id",), True, True)


def test_the_key_it_rested_on_still_there_is_no_problem():
    assert key_problem(meta(), [PK], NOT_NULL) is None
    assert key_identity(meta().storage) == "c500" and key_identity(meta(index=None).storage) is None


def test_a_key_replaced_by_a_wider_one_no_longer_identifies_rows():
    wider = UniqueKey("acct_pkey", "c501", True, ("id", "region"), True, True)
    assert "no unique index of public.acct covers its key (id)" in key_problem(meta(), [wider], NOT_NULL)
    assert "no unique index" in key_problem(meta(), [], NOT_NULL)


def test_a_key_dropped_and_added_back_has_another_index_oid():
    again = PK._replace(identity="c777")
    assert "rested on constraint OID 500, which is gone" in key_problem(meta(), [again], NOT_NULL)
    assert key_problem(meta(index=None), [again], NOT_NULL) is None  # planned before the OID was recorded


def test_a_deferrable_or_nullable_key_is_a_problem_and_a_chunk_key_never():
    assert "DEFERRABLE now" in key_problem(meta(), [PK._replace(identity="c9", immediate=False)], NOT_NULL)
    assert "nullable now" in key_problem(meta(), [PK], {**NOT_NULL, "id": False})
    assert key_problem(meta(source="chunk_key", index=None), [], NOT_NULL) is None


def test_a_narrower_unique_key_inside_the_key_still_identifies_rows():
    narrow = UniqueKey("acct_id_key", "i600", False, ("id",), True, True)
    assert key_problem(meta(("id", "region"), index=None), [narrow], NOT_NULL) is None


keys = st.lists(st.builds(UniqueKey, st.sampled_from(["a", "b", "c"]), st.sampled_from(["c1", "i2"]), st.booleans(),
                          st.sampled_from([("id",), ("id", "region"), ("v",)]), st.booleans(), st.booleans()),
                max_size=5)


@given(keys)
def test_the_chosen_key_is_never_deferrable_and_prefers_the_primary_key(found):
    key = chosen_key(found)
    usable = [k for k in found if k.immediate and (k.primary or k.not_null)]
    assert (key is None) == (not usable)
    if key is not None:
        assert key.immediate
        assert key.primary or not any(k.primary and k.immediate for k in found)
