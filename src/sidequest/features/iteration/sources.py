"""Ready-made enumerators for `IterableJob.build_enumerator`: each yields `(item, cursor)` pairs
and, given the cursor of the last item handled, starts with the item after it.

    range_items(0, 1000, cursor=cursor)                    # cursor: the last number handled
    list_items(["a", "b"], cursor=cursor)                  # cursor: the last index handled
    keyset_items(fetch, key=lambda row: row[0], cursor=cursor)   # cursor: the last row's key
    csv_rows("users.csv", cursor=cursor)                   # cursor: byte offset after the last row

`keyset_items` works with any database API: `fetch(after, limit)` returns up to `limit` rows
whose key is greater than `after` (every row when `after` is None), in key order. With SQL:

    def fetch(after, limit):
        if after is None:
            return db.execute("SELECT id, name FROM users ORDER BY id LIMIT ?", (limit,)).fetchall()
        return db.execute("SELECT id, name FROM users WHERE id > ? ORDER BY id LIMIT ?",
                          (after, limit)).fetchall()

The key must be unique and ordered (a primary key, or a tuple of columns ending with one), and
a JSON value (a list, for a tuple key: `fetch` receives what JSON gives back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def range_items(start: int, stop: int, step: int = 1, *, cursor: int | None = None) -> Iterator[tuple[int, int]]:
    """The numbers of `range(start, stop, step)` after `cursor`, each its own cursor."""
    first = start if cursor is None else cursor + step
    for n in range(first, stop, step):
        yield n, n


def list_items(items: Sequence[T], *, cursor: int | None = None) -> Iterator[tuple[T, int]]:
    """The items of `items` after index `cursor`, each with its index."""
    for index in range(0 if cursor is None else cursor + 1, len(items)):
        yield items[index], index


def keyset_items(fetch: Callable[[Any, int], Sequence[T]], key: Callable[[T], Any], *,
                 cursor: Any = None, batch_size: int = 100) -> Iterator[tuple[T, Any]]:
    """The rows after key `cursor`, read `batch_size` at a time with `fetch(after, limit)`.

    Keyset pagination, not OFFSET: each page costs an index seek, and rows inserted or deleted
    meanwhile never shift the walk (a row inserted behind the cursor is not seen)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    after = cursor
    while True:
        rows = fetch(after, batch_size)
        for row in rows:
            after = key(row)
            yield row, after
        if len(rows) < batch_size:
            return


def csv_rows(path: str | Path, *, cursor: int | None = None, header: bool = True,
             encoding: str = "utf-8", **fmtparams: Any) -> Iterator[tuple[Any, int]]:
    """The rows of a CSV file after byte offset `cursor`, each with the offset just past it.

    With `header` (the default) the first row names the fields and each item is a dict, as
    `csv.DictReader` gives; else a list. Quoted fields spanning lines are read whole."""
    with open(path, "rb") as raw:
        names: list[str] | None = None
        if header:
            names = next(_rows(raw, encoding, fmtparams), (None, 0))[0]
            if names is None:
                return
        if cursor is not None:
            raw.seek(cursor)
        for row, offset in _rows(raw, encoding, fmtparams):
            yield (dict(zip(names, row, strict=False)) if names is not None else row), offset


def _rows(raw: Any, encoding: str, fmtparams: dict[str, Any]) -> Iterator[tuple[list[str], int]]:
    """Rows from the binary file's current position, each with the byte offset after it.

    The lines are read one at a time (csv pulls a further line only for a quoted field that
    spans lines), so the file's position after each row is where the next one starts."""
    import csv  # here: only a job that reads a CSV file pays for the module

    def lines() -> Iterator[str]:
        while line := raw.readline():
            yield line.decode(encoding)

    for row in csv.reader(lines(), **fmtparams):
        yield row, raw.tell()
