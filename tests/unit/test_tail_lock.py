"""Only one tail appends per state directory: a second one waits for the first, then resumes."""
from __future__ import annotations

import threading

from airflow_provider_dblog.steps.tail import tail_lock
from airflow_provider_dblog.store.state import StateDir


def test_a_second_tail_waits_for_the_first(tmp_path):
    state = StateDir(tmp_path / "state")
    order: list[str] = []
    second_entered = threading.Event()

    def second():
        with tail_lock(state):
            order.append("second")
            second_entered.set()

    with tail_lock(state):
        order.append("first")
        thread = threading.Thread(target=second)
        thread.start()
        assert not second_entered.wait(1.0), "the second tail ran while the first held the lock"
        order.append("first done")
    thread.join(10)
    assert order == ["first", "first done", "second"]
