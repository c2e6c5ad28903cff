"""One exception type whose message is the one-line reason shown to the user (CLI, task log), and the
one line to show for an error that crossed Spark (an executor's Python traceback inside Py4J's)."""
import re


# a table planned again (a new key) while its stream ran: the stream stops and starts again with the new plan
REPLANNED = "planned again after a key change; its stream starts again with the new plan"


class DblogError(Exception):
    """A problem the user can fix; the message names the problem and the fix, on one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class UnsupportedTables(DblogError):
    """Tables a capture cannot take as they are: a plan gathers every such table of a capture into one line
    (``describe`` makes it from their names)."""

    def __init__(self, tables: list[str], describe):
        super().__init__(describe(list(tables)))
        self.tables, self.describe = list(tables), describe

    def __reduce__(self):  # crosses Spark as the plain error it reads as
        return DblogError, (str(self),)


class UnknownTable(DblogError):
    """The source has no table of that name (never had, or dropped or renamed away): a tail takes it for gone
    and keeps the lake's rows; any other refusal of a table it follows stops it."""


class StreamLost(DblogError):
    """The source's change log of the whole capture is gone, not a table's part of it (a PostgreSQL slot the
    server invalidated or someone dropped): no table can be caught up from it, so re-reading tables alone would
    only repeat itself. ``--on-purge resnapshot`` first makes the log anew (``DataSourceDialect.renew_stream``),
    then reads every table again; where that cannot be, the capture starts again."""


class TryAgainLater(DblogError):
    """A passing condition at the source stopped the step (an XA transaction still prepared): the same step
    later may succeed, so a running capture retries it instead of giving up on the table."""


class ReadChunkAgain(DblogError):
    """Something inside a chunk's watermark window the window cannot place against the chunk's SELECT:
    the chunk is read again (a fresh window), never written as it is."""


class SchemaChangedError(ReadChunkAgain):
    """The table's columns changed while a chunk was read (a DDL statement in its watermark window):
    the chunk is read again with the columns now in force."""


class UnseenXaCommit(ReadChunkAgain):
    """An XA transaction prepared before a chunk's low watermark committed inside its window: its rows were
    written at its prepare, before the window, so the window cannot say which keys of the chunk it changed,
    and the SELECT may have read them as they were before it."""


def root_cause(message: str) -> str:
    """The first line that says what went wrong, not Py4J's or Spark's wrapper headers; an executor that
    cannot import a module gets the fix."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in lines:
        for marker in ("DblogError: ", "dblog: error: "):
            if marker in line:
                return line.split(marker, 1)[1]
    missing = re.search(r"ModuleNotFoundError: No module named '([^']+)'", message)
    if missing and "python worker" in message.lower():
        return (f"the Python of the Spark executors cannot import {missing.group(1)}: install "
                f"airflow-provider-dblog and its executor requirements into it (spark.pyspark.python), or ship "
                f"them with --py-files / spark.archives (docs/deploy.md)")
    for line in reversed(lines):
        if "Error: " in line or "Exception: " in line:
            return line
    return lines[0] if lines else message
