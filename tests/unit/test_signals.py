"""``core.signals.parse_signal``: what a signal row asks for, or its one-line refusal."""
from __future__ import annotations

import json

import pytest

from airflow_provider_dblog.core.signals import SignalError, parse_signal

CAPTURED = {"shop.orders", "shop.items"}


def test_an_execute_snapshot_names_tables_and_filters():
    data = json.dumps({"data-collections": ["shop.orders", "shop.items"], "type": "INCREMENTAL",
                       "additional-conditions": [{"data-collection": "shop.orders", "filter": "id < 10"}]})
    signal = parse_signal("s1", "execute-snapshot", data, CAPTURED)
    assert signal.tables == ("shop.orders", "shop.items") and signal.filters == {"shop.orders": "id < 10"}
    old = parse_signal("s2", "EXECUTE-SNAPSHOT", json.dumps({"data-collections": "shop.items",
                                                             "additional-condition": "qty > 1"}), CAPTURED)
    assert old.tables == ("shop.items",) and old.filters == {"shop.items": "qty > 1"}
    assert parse_signal("s3", "log", "{}", CAPTURED) is None  # other types: ignored


@pytest.mark.parametrize("data, message", [
    ("not json", "is not JSON"),
    ("[1]", "must be a JSON object"),
    ('{"data-collections": []}', "must name the tables"),
    ('{"data-collections": ["shop.nope"]}', "shop.nope not captured"),
    ('{"data-collections": ["shop.orders"], "type": "blocking"}', "is not supported"),
    ('{"data-collections": ["shop.orders"], "additional-conditions": [{"data-collection": "shop.items", '
     '"filter": "x"}]}', "needs a data-collection among data-collections"),
])
def test_a_bad_signal_is_refused_in_one_line(data, message):
    with pytest.raises(SignalError) as exc:
        parse_signal("bad", "execute-snapshot", data, CAPTURED)
    assert message in str(exc.value) and "\n" not in str(exc.value) and str(exc.value).startswith("signal bad: ")
