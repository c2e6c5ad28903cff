"""Straight-line decoders generated per table layout (the binlog's row images, pgoutput's tuples).

A generic decoder pays a Python dispatch per column per row; a function generated once for a layout
reads each column with the code its type needs and nothing else. ``Builder`` collects the lines and the
constants they name; ``compile_function`` turns them into a function. The source is generated from type
metadata only (never from values), so ``exec`` runs nothing a row could inject.
"""
from __future__ import annotations


class Builder:
    """The body of one generated function: its lines and the constants (``env``) they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict = {}

    def const(self, prefix: str, value) -> str:
        """A name for ``value`` in the generated function's globals."""
        name = f"{prefix}{len(self.env)}"
        self.env[name] = value
        return name

    def emit(self, text: str, indent: int = 2) -> None:
        self.lines.append("    " * indent + text)


def compile_function(b: Builder, name: str, label: str, args: str = "buf, p"):
    """``def name(args):`` with ``b``'s lines as its body, compiled under ``label`` (shown in tracebacks)."""
    source = f"def {name}({args}):\n" + "\n".join(b.lines) + "\n"
    exec(compile(source, f"<{label}>", "exec"), b.env)  # noqa: S102 (generated from type metadata only)
    return b.env[name]
