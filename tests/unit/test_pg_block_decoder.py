"""The column-by-column decoder of pgoutput row messages (source/postgres/block_decoder.py) against the path it
stands in for: the stream's one-message-at-a-time decode (``SlotReader._row_events``: ``row_decoder`` +
``row_change``) then ``event_rows``. On random runs of Inserts, Updates (without and with an old row or key) and
Deletes (old key or row) of tables of every type ``test_pg_values`` converts, NULLs, unchanged TOASTed values and
refused values anywhere: the block's rows equal the events' rows value for value, or the block gives up and the
messages really are outside its shape (the stream then decodes them one by one)."""
from __future__ import annotations

import math
import struct

import pyarrow as pa

from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_provider_dblog.core.errors import DblogError
from airflow_provider_dblog.core.positions import lsn_position
from airflow_provider_dblog.core.tables import Column, TableMeta
from airflow_provider_dblog.source.postgres import values as V
from airflow_provider_dblog.source.postgres import block_decoder
from airflow_provider_dblog.source.postgres.block_decoder import decode_block
from airflow_provider_dblog.source.postgres.dialect import arrow_schema
from airflow_provider_dblog.source.postgres.pgoutput import UNCHANGED_TOAST
from airflow_provider_dblog.source.postgres.stream import SlotReader, _Version
from airflow_provider_dblog.store.lake import block_rows, event_rows
from tests.unit.test_pg_values import CONVERSIONS, REFUSALS
from tests.unit.test_pgoutput import tuple_data

TEXTS: dict[tuple[int, int], list[str]] = {}
for _oid, _typmod, _text, _ in CONVERSIONS:
    TEXTS.setdefault((_oid, _typmod), []).append(_text)
REFUSED = {(oid, typmod): text for oid, typmod, text in REFUSALS}
TYPES = sorted(TEXTS)
EXOTIC = [b"+00:19:32"]  # an offset in seconds (before 1901): Arrow does not read it, the block gives up
OID = 16400
FIRST = lsn_position(0x1234_5678 + 1, 0)


def meta_of(types) -> TableMeta:
    columns = (Column("id", "bigint", "bigint", False, type_oid=V.INT8, typmod=-1),
               *(Column(f"c{i}", "t", "t", True, type_oid=oid, typmod=typmod) for i, (oid, typmod) in enumerate(types)))
    return TableMeta("public", "t", columns, ("id",), "primary")


def message(op: str, new=None, old=None) -> bytes:
    head = op.encode()[:1] + struct.pack("!I", OID)
    if op == "I":
        return head + b"N" + tuple_data(*new)
    if op == "U":
        return head + b"N" + tuple_data(*new)
    if op in ("UO", "UK"):
        return head + op[1].encode() + tuple_data(*old) + b"N" + tuple_data(*new)
    return head + op[1].encode() + tuple_data(*old)  # DK, DO


@st.composite
def runs(draw):
    """A table of random types and a run of messages; in a run with ``rare`` messages, each one may hold an
    unchanged TOASTed or a refused value, be an Update with the old key or change the key of an old row."""
    types = draw(st.lists(st.sampled_from(TYPES), min_size=0, max_size=8))
    rare = draw(st.sampled_from([0.0, 0.05, 0.3]))  # the share of messages out of the common shape
    made = []

    def value(t, odd, toast_ok=False):
        choices = [st.none(), st.sampled_from(TEXTS[t])]
        if odd and toast_ok:
            choices.append(st.just(UNCHANGED_TOAST))
        if odd and t in REFUSED:
            choices.append(st.just(REFUSED[t]))
        return draw(st.one_of(*choices))

    def row(key, odd, toast_ok=False):
        made.append([str(key)] + [value(t, odd, toast_ok) for t in types])
        return made[-1]

    # runs of every kind, and runs whose messages carry no old rows (inserts, updates that keep their key) or no
    # new rows (deletes): the block decoder does not decode an image no message carries
    common = draw(st.sampled_from([["I", "U", "UO", "DK", "DO"], ["I", "U"], ["U"], ["DK", "DO"], ["UO"]]))
    msgs = []
    for _ in range(draw(st.integers(1, 60))):
        odd = draw(st.floats(0, 1)) < rare
        op = draw(st.sampled_from(["I", "U", "UO", "UO", "UK", "DK", "DO"] if odd else common))
        key = draw(st.integers(-5, 5))
        if op == "I":
            msgs.append(message(op, new=row(key, odd)))
        elif op == "U":
            msgs.append(message(op, new=row(key, odd, toast_ok=True)))
        elif op == "UO":
            other = draw(st.sampled_from([key, key + 1])) if odd else key
            msgs.append(message(op, old=row(key, odd), new=row(other, odd, toast_ok=True)))
        elif op == "UK":
            msgs.append(message(op, old=[str(key)] + [None] * len(types), new=row(key + 1, odd)))
        elif op == "DK":
            msgs.append(message(op, old=[str(key)] + [None] * len(types)))
        else:
            msgs.append(message(op, old=row(key, odd)))
    return meta_of(types), msgs, any(UNCHANGED_TOAST in m for m in made)


def one_by_one(meta: TableMeta, msgs: list[bytes], ts: list[int], indices=None):
    """The stream's own per-message path for ``indices`` (all by default): its events, or None when it refuses a
    value."""
    reader, version, events = SlotReader.__new__(SlotReader), _Version(meta), []
    try:
        for i in indices if indices is not None else range(len(msgs)):
            events += reader._row_events("public.t", version, msgs[i][0], msgs[i], FIRST.with_row(i), ts[i])
    except DblogError:
        return None
    return events


def why_not(meta, msgs) -> str:
    try:
        block_decoder._decode("public.t", meta, msgs, FIRST, ["p"] * len(msgs), [0] * len(msgs))
    except Exception as exc:  # noqa: BLE001 - the reason, for the assertion's message
        return repr(exc)
    return "no exception"


def same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return a == b and type(a) is type(b)


@settings(max_examples=int(__import__("os").environ.get("PG_BLOCK_EXAMPLES", "150")), deadline=None)
@given(runs())
def test_blocks_and_the_messages_left_are_the_rows_of_the_events(case):
    """``decode_blocks`` (what the stream calls): its blocks, and the events of the messages it leaves, are the
    rows of the events of every message, in order; a refused value is always among the messages left."""
    meta, msgs, toasted = case
    n = len(msgs)
    ts = [1_700_000_000_000 + i for i in range(n)]
    pieces = block_decoder.decode_blocks("public.t", meta, msgs, lambda i: FIRST.with_row(2 * i),
                                         [FIRST.with_row(2 * i).encode() for i in range(n)], ts)
    schema, cursor, parts, left = arrow_schema(meta), 0, [], []
    for piece in pieces:
        if isinstance(piece, range):
            assert piece.start == cursor and len(piece) > 0
            events = one_by_one(meta, msgs, ts, piece)
            left += list(piece)
            if events is not None and events:
                parts.append(event_rows(events, [0] * len(events), schema))
            cursor = piece.stop
        else:
            assert piece.first == FIRST.with_row(2 * cursor)
            parts.append(block_rows(piece, [0] * len(piece), schema))
            cursor += len(piece)
    assert cursor == n
    events = one_by_one(meta, msgs, ts)
    if events is None:  # the stream refuses a value: it must be in a message left for the per-message path
        assert one_by_one(meta, msgs, ts, left) is None
        return
    got = pa.concat_tables(parts, promote_options="permissive").to_pylist() if parts else []
    want = event_rows(events, [0] * len(events), schema).to_pylist()
    assert len(got) == len(want) and all(same(g, w) for g, w in zip(got, want)), "the rows differ"
    plain = not toasted and not any(m[0] == ord("U") and m[5] == ord("K") or any(t in m for t in EXOTIC) for m in msgs)
    if plain and len(events) == n:
        assert len(pieces) == 1 and not isinstance(pieces[0], range), f"gave up on plain messages: {why_not(meta, msgs)}"


@settings(max_examples=int(__import__("os").environ.get("PG_BLOCK_EXAMPLES", "150")), deadline=None)
@given(runs())
def test_a_whole_block_is_the_rows_of_the_events_or_none(case):
    meta, msgs, toasted = case
    ts = [1_700_000_000_000 + i for i in range(len(msgs))]
    positions = [FIRST.with_row(2 * i).encode() for i in range(len(msgs))]
    block = decode_block("public.t", meta, msgs, FIRST, positions, ts)
    events = one_by_one(meta, msgs, ts)
    if block is None:
        return
    assert events is not None and len(events) == len(msgs) and not any(e.unchanged for e in events)
    schema = arrow_schema(meta)
    chunks = [i % 3 for i in range(len(msgs))]
    got, want = block_rows(block, chunks, schema), event_rows(events, chunks, schema)
    assert got.schema == want.schema
    got_rows, want_rows = got.to_pylist(), want.to_pylist()
    for i, (g, w) in enumerate(zip(got_rows, want_rows)):
        assert same(g, w), (i, g, w)
    assert len(got_rows) == len(want_rows) and block.keys(meta.key_columns) == [e.key for e in events]


def test_the_common_shape_is_decoded_as_a_block():
    """Inserts, updates without and with the old row, deletes by key and by row, a NULL: no giving up."""
    types = [(V.NUMERIC, 4 + (15 << 16) + 2), (V.TEXT, -1), (V.TIMESTAMPTZ, -1), (V.BOOL, -1), (V.DATE, -1),
             (V.FLOAT4, -1), (V.BYTEA, -1), (V.INT4, -1)]
    meta = meta_of(types)
    row = ["12.50", "héllo", "2024-01-02 03:04:05.5+00", "t", "2024-02-29", "1.1", "\\x00ff", "7"]
    msgs = [message("I", new=["1", *row]), message("U", new=["1", *row[:-1], None]),
            message("UO", old=["1", *row], new=["1", *row[:1], None, *row[2:]]),
            message("DK", old=["1"] + [None] * len(types)), message("DO", old=["2", *row])]
    ts = [1, 2, 3, 4, 5]
    positions = [FIRST.with_row(2 * i).encode() for i in range(5)]
    block = decode_block("public.t", meta, msgs, FIRST, positions, ts)
    assert block is not None and len(block) == 5
    assert block.ops.to_pylist() == ["c", "u", "u", "d", "d"]
    rows = block_rows(block, [0] * 5, arrow_schema(meta)).to_pylist()
    assert rows[1]["c7"] is None and rows[2]["c1"] is None and rows[0]["c6"] == b"\x00\xff"
    assert rows[1]["_before"] == {"id": 1, **{f"c{i}": None for i in range(len(types))}}
    assert rows[3]["_before"]["id"] == 1 and rows[4]["c1"] == "héllo" and rows[0]["_before"] is None
    assert block_rows(block, [0] * 5, arrow_schema(meta)).equals(event_rows(one_by_one(meta, msgs, ts), [0] * 5,
                                                                             arrow_schema(meta)))


def test_bytes_out_of_the_protocol_give_up():
    meta = meta_of([(V.TEXT, -1)])
    good = message("I", new=["1", "x"])  # I, OID, N, count, t len '1', t len 'x' (its length at 15..18)
    assert decode_block("public.t", meta, [good, good], FIRST, ["a", "b"], [0, 0]) is not None
    for bad in (good[:15] + b"\x7f\xff\xff\xff" + good[19:], good[:15] + struct.pack("!i", -1) + good[19:],
                good + b"\0", good[:-1], good[:14] + b"b" + good[15:], good[:6] + b"\0\x03" + good[8:]):
        assert decode_block("public.t", meta, [good, bad], FIRST, ["a", "b"], [0, 0]) is None


def test_a_key_change_in_a_run_leaves_the_plain_messages_around_it_in_blocks():
    meta = meta_of([(V.TEXT, -1)])
    msgs = ([message("I", new=[str(k), "x"]) for k in range(40)] + [message("UK", old=["3", None], new=["99", "y"])]
            + [message("U", new=[str(k), "z"]) for k in range(40)] + [message("U", new=["1", UNCHANGED_TOAST])]
            + [message("DK", old=[str(k), None]) for k in range(5)] + [message("U", new=["1", UNCHANGED_TOAST])]
            + [message("I", new=[str(k), "x"]) for k in range(40)])
    n = len(msgs)
    pieces = block_decoder.decode_blocks("public.t", meta, msgs, lambda i: FIRST.with_row(2 * i),
                                         [FIRST.with_row(2 * i).encode() for i in range(n)], [0] * n)
    assert [p if isinstance(p, range) else (p.first.row // 2, len(p)) for p in pieces] == [
        (0, 40), range(40, 41), (41, 40), range(81, 88), (88, 40)]  # 5 plain messages between: one by one


def test_a_run_is_full_at_its_message_count_or_its_bytes():
    """Large values (documents of 100 kB) make short runs: the decoder's gather index (8 bytes per value byte)
    stays bounded by ``BLOCK_BYTES``, not by ``BLOCK_ROWS`` times the largest message. A run takes a transaction's
    messages at once or one by one, and is full at the same message either way."""
    from airflow_provider_dblog.source.postgres.stream import BLOCK_BYTES, BLOCK_ROWS, _Run

    version = _Version(meta_of([(V.TEXT, -1)]))
    many = [b"x" * 100] * (BLOCK_ROWS + 5)
    at_once, one_by_one = _Run("public.t", version, True), _Run("public.t", version, True)
    assert at_once.add(many, [100] * len(many), FIRST, 0, 0) == BLOCK_ROWS and at_once.full
    assert all(one_by_one.add(many[:1], [100], FIRST, i, 0) == 1 and not one_by_one.full
               for i in range(BLOCK_ROWS - 1))
    assert one_by_one.add(many[:1], [100], FIRST, BLOCK_ROWS - 1, 0) == 1 and one_by_one.full
    document = b"x" * 100_000
    documents = [document] * (BLOCK_BYTES // len(document) + 5)
    big = _Run("public.t", version, True)
    assert big.add(documents[:3], [len(document)] * 3, FIRST, 0, 0) == 3 and not big.full
    taken = big.add(documents, [len(document)] * len(documents), FIRST, 3, 0)
    assert taken == BLOCK_BYTES // len(document) + 1 - 3 and big.full
    assert big.bytes >= BLOCK_BYTES > big.bytes - len(document)


def test_the_spans_of_a_batch_are_runs_of_one_relations_row_messages():
    """``_row_spans``: each row message's span ends at the next message that is not a row message of its relation;
    ``_span_arrays``: each message's span, row and ts."""
    from airflow_provider_dblog.source.postgres.stream import _row_spans, _span_arrays

    def row(tag: bytes, oid: int) -> bytes:
        return tag + oid.to_bytes(4, "big") + b"N\x00\x00"

    batch = [b"B" + bytes(20), row(b"I", 7), row(b"U", 7), row(b"D", 7), row(b"I", 8), b"R" + bytes(3),
             row(b"I", 8), b"C" + bytes(25), row(b"U", 2**32 - 1)]
    assert _row_spans(batch, [len(m) for m in batch]) == [1, 4, 4, 4, 5, 6, 7, 8, 9]
    assert _row_spans(batch[1:2], [8]) == [1]
    other = FIRST.with_row(0).__class__(FIRST.seq, FIRST.offset + 1)
    span, rows, ts = _span_arrays([(FIRST, 3, 2, 10), (other, 0, 1, 11), (FIRST, 5, 3, 10)])
    assert span.tolist() == [0, 0, 1, 2, 2, 2]
    assert rows.tolist() == [3, 4, 0, 5, 6, 7] and ts.tolist() == [10, 10, 11, 10, 10, 10]
