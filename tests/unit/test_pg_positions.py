"""PostgreSQL positions without a server: a transaction's changes sort between the boundaries around its commit
record, a snapshot's visibility of pgoutput's 32-bit xids, and the exact position of a checksum snapshot."""
from __future__ import annotations

from hypothesis import given, strategies as st

from airflow_provider_dblog.core.positions import lsn_position
from airflow_provider_dblog.source.postgres.checksum import exact_position, parse_snapshot, visible
from airflow_provider_dblog.source.postgres.stream import change_position


@given(st.integers(0, 2**48), st.integers(0, 2**48), st.integers(0, 10_000))
def test_a_transaction_is_whole_on_one_side_of_every_boundary(final_lsn, boundary, row):
    pos = change_position(final_lsn, row)
    before = final_lsn < boundary  # the rule: its commit record starts below the boundary
    assert (pos <= lsn_position(boundary).as_snapshot()) == before
    assert (pos > lsn_position(boundary).as_snapshot()) == (not before)


def test_visibility_of_32_bit_xids_in_a_64_bit_snapshot():
    epoch = 3 << 32
    snapshot = parse_snapshot(f"{epoch + 100}:{epoch + 110}:{epoch + 103},{epoch + 105}")
    assert visible(99, snapshot) and visible(100, snapshot) and visible(104, snapshot)
    assert not visible(103, snapshot) and not visible(105, snapshot) and not visible(110, snapshot)
    assert not visible(200, snapshot)
    wrapped = parse_snapshot(f"{epoch + 5}:{epoch + 8}:")  # an xid from before the epoch's wraparound
    assert visible(0xFFFFFFF0, wrapped) and not visible(9, wrapped)


def test_the_exact_position_of_a_snapshot():
    snapshot = parse_snapshot("100:110:105")
    commits = [(1000, 101), (1100, 104), (1200, 105), (1300, 111)]
    assert exact_position(commits, snapshot, 2000) == 1200  # sees the first two only
    assert exact_position([], snapshot, 2000) == 2000
    assert exact_position(commits[:2], snapshot, 2000) == 2000  # sees every one
    assert exact_position([(1000, 105), (1100, 101)], snapshot, 2000) is None  # a later one but not an earlier one
