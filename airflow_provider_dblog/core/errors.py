"""One exception type whose message is the one-line reason shown to the user (CLI, task log)."""


class DblogError(Exception):
    """A problem the user can fix; the message names the problem and the fix, on one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class SchemaChangedError(DblogError):
    """The table's columns changed while a chunk was read (a DDL statement in its watermark window):
    the chunk is read again with the columns now in force."""
