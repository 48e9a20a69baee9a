"""Export 500,000 rows to one CSV: 50 jobs write a part each, a callback merges them.

    .venv/bin/python examples/export.py [--no-worker] [--out DIR]

Each job generates its 10,000 rows and writes them to `part-NNNNN.csv` (to a temporary name
first, then renamed, so a retried job never leaves half a part). The task's `on_success`
callback, enqueued once every part is written, merges the parts in order into `export.csv`,
checks the row count against the task's meta, removes the parts and reports the result on a
Redis list that this script waits on.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import sidequest

QUEUE = "examples-export"
ROWS = 500_000
ROWS_PER_JOB = 10_000
HEADER = "id,customer,amount,created_at\n"


def part_path(folder: str, index: int) -> Path:
    return Path(folder) / f"part-{index:05d}.csv"


def result_key(task_id: str) -> str:
    return f"examples:export:{task_id}"


@sidequest.job(name="examples.export.export_part", queue=QUEUE)
def export_part(folder: str, index: int, first: int, count: int) -> None:
    """Write rows `first`..`first + count - 1` (generated here; a real export would query them)."""
    path = part_path(folder, index)
    scratch = path.with_suffix(".tmp")
    with open(scratch, "w") as f:
        f.writelines(f"{i},customer-{i % 9973},{(i * 7919) % 100_000 / 100:.2f},{1_700_000_000 + i}\n"
                     for i in range(first, first + count))
    os.replace(scratch, path)


@sidequest.job(name="examples.export.merge_parts", queue=QUEUE, retry=3)
def merge_parts(task_id: str) -> None:
    """The task's on_success callback: one CSV from the parts, its row count checked."""
    meta = sidequest.Task(task_id).status()["meta"]
    output = Path(meta["folder"]) / "export.csv"
    rows = 0
    with open(output, "w") as out:
        out.write(HEADER)
        for index in range(meta["parts"]):
            with open(part_path(meta["folder"], index)) as part:
                for line in part:
                    out.write(line)
                    rows += 1
    ok = rows == meta["rows"]
    if ok:
        for index in range(meta["parts"]):
            part_path(meta["folder"], index).unlink()
    redis = sidequest.default_client().redis
    redis.rpush(result_key(task_id), json.dumps({"path": str(output), "rows": rows, "ok": ok}))
    redis.expire(result_key(task_id), 3600)


def main() -> int:
    from _common import arguments, connect, follow, worker  # not at the top: see _common's docstring

    parser = arguments(__doc__)
    parser.add_argument("--out", help="folder for the export (default: a new temporary folder, kept)")
    args = parser.parse_args()
    folder = args.out or tempfile.mkdtemp(prefix="sidequest-export-")
    os.makedirs(folder, exist_ok=True)
    config = connect(QUEUE)
    with worker(config, start=not args.no_worker):
        started = time.monotonic()
        parts = range(ROWS // ROWS_PER_JOB)
        task = sidequest.Task.create(f"export {ROWS:,} rows", on_success=merge_parts,
                                     meta={"folder": folder, "parts": len(parts), "rows": ROWS})
        task.add_bulk(export_part, [[folder, i, i * ROWS_PER_JOB + 1, ROWS_PER_JOB] for i in parts])
        task.seal()
        print(f"task {task.id}: {ROWS:,} rows in {len(parts)} jobs of {ROWS_PER_JOB:,}")
        status = follow(task)
        if status["counts"]["finished"] != status["total"]:
            print("some parts failed: no merge (on_success runs only when every job finished)")
            return 1
        print("every part written; waiting for the merge ...")
        got = sidequest.default_client().redis.blpop([result_key(task.id)], timeout=120)
        elapsed = time.monotonic() - started
    if got is None:
        print("the merge did not report within 120 s")
        return 1
    result = json.loads(got[1])
    print(f"\n{result['path']}: {result['rows']:,} rows (expected {ROWS:,}), {os.path.getsize(result['path']):,} bytes,"
          f" in {elapsed:.1f} s")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
