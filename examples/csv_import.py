"""Import a 10,000-row CSV into SQLite, split into jobs of 250 rows, tracked as one task.

    .venv/bin/python examples/csv_import.py [--no-worker]

The script writes the CSV (with a few invalid rows) into a temporary folder and adds one job
per 250 rows. Each job validates its rows, writes the good ones to the `products` table and
the bad ones, with the reason, to `rejects`, and reports after every 50 rows with
`sidequest.task_message("rows a-b imported", progress=...)`. Writes are keyed by row number,
so a job that is retried imports nothing twice. The summary counts rows from the database.
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import sidequest

QUEUE = "examples-csv-import"
ROWS = 10_000
ROWS_PER_JOB = 250
BATCH = 50


def write_csv(path: Path) -> None:
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["sku", "name", "price", "quantity"])
        for row in range(1, ROWS + 1):
            price = "n/a" if row % 211 == 0 else f"{(row * 7919) % 10_000 / 100:.2f}"
            name = "" if row % 347 == 0 else f"Product {row}"
            record = [f"SKU-{row:05d}", name, price, row % 40]
            out.writerow(record[:3] if row % 997 == 0 else record)


def create_db(path: Path) -> None:
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode=WAL")  # the jobs write concurrently
        db.execute("CREATE TABLE products (row INTEGER PRIMARY KEY, sku TEXT, name TEXT,"
                   " price REAL, quantity INTEGER)")
        db.execute("CREATE TABLE rejects (row INTEGER PRIMARY KEY, reason TEXT)")


def check(record: list[str]) -> tuple[str, str, float, int]:
    """The row's values, or ValueError saying what is wrong with it."""
    if len(record) != 4:
        raise ValueError(f"expected 4 fields, got {len(record)}")
    sku, name, price, quantity = record
    if not name.strip():
        raise ValueError("name is empty")
    try:
        return sku, name, float(price), int(quantity)
    except ValueError:
        bad = price if not price.replace(".", "", 1).isdigit() else quantity
        raise ValueError(f"{bad!r} is not a number") from None


@sidequest.job(name="examples.csv_import.import_rows", queue=QUEUE)
def import_rows(csv_path: str, db_path: str, first: int, last: int) -> None:
    """Import data rows `first`..`last` (1-based, after the header) of the CSV."""
    with open(csv_path, newline="") as f, contextlib.closing(sqlite3.connect(db_path, timeout=30)) as db:
        rows = itertools.islice(csv.reader(f), first, last + 1)  # line 0 is the header
        for start in range(first, last + 1, BATCH):
            good, bad = [], []
            for row, record in zip(range(start, min(start + BATCH - 1, last) + 1), rows, strict=False):
                try:
                    good.append((row, *check(record)))
                except ValueError as exc:
                    bad.append((row, str(exc)))
            with db:  # one transaction per batch
                db.executemany("INSERT OR REPLACE INTO products VALUES (?, ?, ?, ?, ?)", good)
                db.executemany("INSERT OR REPLACE INTO rejects VALUES (?, ?)", bad)
            time.sleep(0.05)  # stands in for slower work (lookups, an API call)
            end = min(start + BATCH - 1, last)
            sidequest.task_message(f"rows {start}-{end} imported" + (f", {len(bad)} rejected" if bad else ""),
                                   progress=round(100 * (end - first + 1) / (last - first + 1)))


def main() -> int:
    from _common import arguments, connect, follow, worker  # not at the top: see _common's docstring

    args = arguments(__doc__).parse_args()
    config = connect(QUEUE)
    with tempfile.TemporaryDirectory(prefix="sidequest-csv-") as tmp, worker(config, start=not args.no_worker):
        csv_path, db_path = Path(tmp) / "products.csv", Path(tmp) / "products.db"
        write_csv(csv_path)
        create_db(db_path)
        started = time.monotonic()
        task = sidequest.Task.create(f"import {csv_path.name}", meta={"rows": ROWS})
        chunks = [[str(csv_path), str(db_path), first, min(first + ROWS_PER_JOB - 1, ROWS)]
                  for first in range(1, ROWS + 1, ROWS_PER_JOB)]
        task.add_bulk(import_rows, chunks)
        task.seal()
        print(f"task {task.id}: {ROWS:,} rows in {len(chunks)} jobs of {ROWS_PER_JOB}")
        status = follow(task)
        elapsed = time.monotonic() - started
        with contextlib.closing(sqlite3.connect(db_path)) as db:
            imported = db.execute("SELECT count(*) FROM products").fetchone()[0]
            rejects = db.execute("SELECT row, reason FROM rejects ORDER BY row").fetchall()

    counts = status["counts"]
    print(f"\n{imported:,} rows imported, {len(rejects)} rejected, of {ROWS:,}, in {elapsed:.1f} s"
          f" ({counts['finished']} jobs finished, {counts['failed'] + counts['error']} failed)")
    for row, reason in rejects[:5]:
        print(f"  row {row}: {reason}")
    if len(rejects) > 5:
        print(f"  ... and {len(rejects) - 5} more")
    first_job = task.events(limit=1)[0]
    print("messages of the first job:", "; ".join(m["text"] for m in first_job["messages"]))
    return 0 if imported + len(rejects) == ROWS and counts["finished"] == status["total"] else 1


if __name__ == "__main__":
    sys.exit(main())
