"""A connection the server closed under a statement (a DBA's KILL or ``pg_terminate_backend``, pt-kill, a
``wait_timeout``, a restart) is opened again and the statement run again: a new connection is the answer, not a
failed tail. Each driver says which of its errors mean that (``ConnectionLost``); this is the one policy."""
from __future__ import annotations

import logging
import time
from typing import Callable, TypeVar

from airflow_provider_dblog.core.errors import DblogError

log = logging.getLogger("dblog")

LOST_CONNECTION_RETRIES = 5  # in a row; then the statement fails in one line
T = TypeVar("T")


class ConnectionLost(Exception):
    """The server closed the connection a statement was sent on (the driver's message, without secrets)."""


def again_when_lost(once: Callable[[], T], forget: Callable[[], None], where: str) -> T:
    """``once()``, run again after ``forget()`` (drop the dead connection: the next use opens one) while it raises
    ``ConnectionLost``, up to ``LOST_CONNECTION_RETRIES`` times in a row. Only for statements that may run twice:
    reads, and writes whose second run changes nothing."""
    for attempt in range(LOST_CONNECTION_RETRIES + 1):
        try:
            return once()
        except ConnectionLost as exc:
            forget()
            if attempt == LOST_CONNECTION_RETRIES:
                raise DblogError(f"{where} closed dblog's connection {attempt + 1} times in a row ({exc}): check that "
                                 f"the server runs and that nothing kills dblog's sessions") from None
            log.warning("the connection to %s was closed by the server (%s): connecting again", where, exc)
            time.sleep(0.1 * attempt)
    raise AssertionError("unreachable")
