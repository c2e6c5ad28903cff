"""PostgreSQL positions without a server: a transaction's changes sort between the boundaries around its commit
record, a snapshot's visibility of pgoutput's 32-bit xids, and the exact position of a checksum snapshot."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.events import row_change
from airflow_provider_dblog.core.positions import CLOSED_ROW, ROWS_PER_POSITION, SourcePosition, lsn_position
from airflow_provider_dblog.source.postgres import stream
from airflow_provider_dblog.source.postgres.checksum import exact_position, parse_snapshot, visible
from airflow_provider_dblog.source.postgres.stream import COMMIT_RECORD_BYTES, POSITION_STEPS, change_position


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


# ---- a transaction of more changes than one position's row index orders (a bulk UPDATE of a big table) -------------
K = ROWS_PER_POSITION
ROWS = st.one_of(st.integers(0, 10_000), st.integers(K - 3, K + 3), st.integers(2 * K - 3, 2 * K + 3),
                 st.integers(0, POSITION_STEPS * K - 1))


@given(st.integers(0, 2**48), st.integers(-2**20, 2**20), ROWS)
def test_a_transaction_is_whole_on_one_side_of_every_boundary(final_lsn, distance, row):
    """Boundaries are where WAL records start (an insert location, a commit's start or end): none falls inside the
    commit record, which takes at least ``COMMIT_RECORD_BYTES``."""
    boundary = max(0, final_lsn + distance) if distance <= 0 else final_lsn + COMMIT_RECORD_BYTES - 1 + distance
    pos = change_position(final_lsn, row)
    before = final_lsn < boundary  # the rule: its commit record starts below the boundary
    assert (pos <= lsn_position(boundary).as_snapshot()) == before
    assert (pos > lsn_position(boundary).as_snapshot()) == (not before)


@given(st.integers(0, 2**48), ROWS, ROWS)
def test_every_change_of_a_huge_transaction_has_its_own_ordered_position(final_lsn, a, b):
    """Rows past ``ROWS_PER_POSITION`` count from the next WAL location: the lake's ``_pos`` of each change's events
    (``row_change``: 2i, and 2i + 1 for a key change's insert) are eight digits below ``CLOSED_ROW``, decode to
    themselves, and order as the changes do, on either side of that step."""
    texts = {}
    for row in (a, b):
        events = row_change("public.t", change_position(final_lsn, row), ("id",), {"id": 1}, {"id": 2})
        assert [e.op for e in events] == ["d", "c"]
        for e in events:
            assert e.pos.row < CLOSED_ROW and SourcePosition.decode(e.pos.encode()) == e.pos
        texts[row] = [e.pos.encode() for e in events]
        assert texts[row][0] < texts[row][1]
    if a != b:
        low, high = sorted((a, b))
        assert texts[low][1] < texts[high][0]
        assert change_position(final_lsn, low) < change_position(final_lsn, high)


def test_the_old_limit_is_passed_without_a_collision():
    """What the positions did before the steps: change 49,999,999 of a transaction was at row 99,999,998 (the
    ``CLOSED_ROW`` of table re-plans) and change 50,000,000 at a nine-digit row that sorts before row 2."""
    final = 0x16B3748
    last, past = change_position(final, K - 1), change_position(final, K)
    assert row_change("public.t", last, ("id",), {"id": 0}, {"id": 1})[1].pos.row == 2 * K - 1 == CLOSED_ROW - 1
    assert past == lsn_position(final + 2, 0) and last < past
    assert row_change("public.t", past, ("id",), None, {"id": 1})[0].pos.encode() > \
        row_change("public.t", last, ("id",), {"id": 0}, {"id": 1})[1].pos.encode()


def test_a_transaction_past_every_location_of_its_commit_record_is_refused_in_one_line():
    change_position(100, POSITION_STEPS * K - 1)
    with pytest.raises(DblogError) as refused:
        change_position(100, POSITION_STEPS * K)
    message = str(refused.value)
    assert "\n" not in message and "0/64" in message and "smaller transactions" in message


def test_a_row_index_no_position_orders_is_refused_in_one_line():
    """The last guard under the readers' own (MySQL: a rows event or XA transaction of 50,000,000 rows)."""
    pos = SourcePosition.at("mysql-bin.000003", 4000, K)
    with pytest.raises(DblogError) as refused:
        row_change("shop.t", pos, ("id",), None, {"id": 1})
    assert "\n" not in str(refused.value) and "mysql-bin.000003:4000" in str(refused.value)
    assert row_change("shop.t", pos.with_row(K - 1), ("id",), None, {"id": 1})[0].pos.row == 2 * (K - 1)


SPANS = st.lists(st.tuples(st.integers(0, 2**40), ROWS, st.integers(1, 40)), min_size=1, max_size=12)


@given(SPANS)
def test_a_runs_positions_are_each_messages_own(collected):
    """A run's block positions (made per run with numpy and Arrow) are the events' positions message by message
    (``_at``), also where a span of one transaction crosses a step."""
    collected = [(change_position(final), min(row, POSITION_STEPS * K - count), count, 0)
                 for final, row, count in collected]
    span, rows, _ = stream._span_arrays(collected)
    starts, which, rows = stream._starts([first for first, _, _, _ in collected], span, rows)
    texts = stream._position_texts(starts, which, rows).to_pylist()
    expected = [stream._at(first, r) for first, row, count, _ in collected for r in range(row, row + count)]
    assert [starts[w].with_row(int(r)) for w, r in zip(which, rows)] == expected
    assert texts == [p.with_row(2 * p.row).encode() for p in expected]


def test_a_row_the_block_leaves_past_a_step_is_bounded_before_its_whole_transaction(monkeypatch):
    """A row message the block decoder leaves to the row path (an UPDATE whose old key is unknown, ...) in a
    transaction past ``ROWS_PER_POSITION`` changes is bounded by the location before the transaction's commit
    record, not before its later step: a stop there (``UNREADABLE``) keeps the whole transaction out of the lake."""
    from tests.unit.test_pg_block_decoder import message, meta_of

    small = 8
    monkeypatch.setattr(stream, "ROWS_PER_POSITION", small)
    monkeypatch.setattr(stream, "decode_blocks", lambda name, meta, payloads, *_: [list(range(len(payloads)))])
    seen: list[SourcePosition] = []

    class Reader:
        def _known_row_events(self, name, version, tag, buf, pos, ts, boundary):
            seen.append(boundary)
            return []

    final = 0x1234_5678
    run = stream._Run("public.t", stream._Version(meta_of([])), blocks=True)
    payloads = [message("I", new=[str(i).encode()]) for i in range(stream.MIN_BLOCK + 8)]
    run.add(payloads, [len(p) for p in payloads], change_position(final), small - 3, 0)
    run.flush(Reader())
    assert len(seen) == len(payloads) and set(seen) == {lsn_position(final)}
