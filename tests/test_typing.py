"""The public surface and its types: `sidequest.__all__`, and what mypy makes of user code.

One mypy run (module-scoped) checks a small user module: every line marked `# error` must be
reported, no other line may be, and `reveal_type` must show the job's own parameters, not Any.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import sidequest


def test_the_public_names_are_exactly_these():
    assert sidequest.__all__ == [
        "AsyncClient",
        "Cancelled",
        "Capsule",
        "Chain",
        "Client",
        "Config",
        "ConfigError",
        "IterableJob",
        "Job",
        "JobArgumentError",
        "JobDefinitionError",
        "JobFailed",
        "JobFunction",
        "JobTimeoutError",
        "NoResultError",
        "OverLimit",
        "PayloadError",
        "RedisUnavailableError",
        "Registry",
        "SidequestError",
        "Signature",
        "Task",
        "UnknownJobError",
        "WorkerSetup",
        "Workflow",
        "aio",
        "cancel",
        "cancelled",
        "chain",
        "chord",
        "configure",
        "configure_worker",
        "default_client",
        "default_registry",
        "group",
        "iteration",
        "job",
        "limiter",
        "periodic",
        "push",
        "push_active_job",
        "redis",
        "result",
        "status",
        "task_message",
        "workflow",
    ]
    assert all(hasattr(sidequest, name) for name in sidequest.__all__)


USER_MODULE = '''
from datetime import datetime, timedelta, timezone

import sidequest


@sidequest.job
def send(user_id: int) -> None:
    ...


@sidequest.job(queue="mail", retry=3)
async def notify(user_id: int, text: str = "") -> str:
    return text


class Resize(sidequest.Job, queue="images", custom={"tenant": "acme"}):
    def perform(self, path: str, width: int) -> None:
        ...


@sidequest.job(retries=3)  # error
def misspelt(user_id: int) -> None:
    ...


class Misspelt(sidequest.Job, quee="images"):  # error
    def perform(self) -> None:
        ...


reveal_type(send)
reveal_type(send.perform_async)
reveal_type(Resize.perform_async)
reveal_type(Resize.set(queue="urgent"))

jid: str | None = send.perform_async(1)
send.perform_in(60, 1)
send.perform_in(timedelta(minutes=1), 1)
send.perform_at(datetime.now(timezone.utc), 1)
send.set(queue="urgent").set(retry=False).perform_async(2)
jids: list[str | None] = send.perform_bulk([[1], [2]])
send(3)
notify.perform_async(1)
notify.perform_async(1, "hi")
Resize.perform_async("a.png", 200)
Resize.perform_in(60, "a.png", 200)
Resize.perform_at(2_000_000_000, "a.png", 200)
Resize.set(queue="urgent", retry=False).perform_async("b.png", 100)
Resize.perform_bulk([["a.png", 1]])
send.set(expires_in=timedelta(hours=1), custom={"trace": "t"}, result_ttl=60).perform_async(1)
sidequest.push("HardWorker", [1], queue="ruby", expires_in=60)
aj_jid: str | None = sidequest.push_active_job("SendReceiptJob", [42, "eur"], {"note": "x"}, queue="mail", priority=5)

send.perform_async("x")  # error
send.perform_async(1, 2)  # error
send.perform_async()  # error
send.perform_in(60, "x")  # error
send.perform_at(datetime.now(timezone.utc), 1, 2)  # error
send.set(queue="urgent").perform_async("x")  # error
send("x")  # error
notify.perform_async(1, 2)  # error
Resize.perform_async("a.png")  # error
Resize.perform_async("a.png", "wide")  # error
Resize.perform_in(60, 200, "a.png")  # error
Resize.set(queue="urgent").perform_async("b.png")  # error
send.set(retries=3)  # error
Resize.set(timout=5)  # error
send.set(queue="urgent").set(result_tll=60)  # error
send.aio.set(max_retries=3)  # error
send.set(queue=3)  # error
sidequest.push("HardWorker", [1], retries=3)  # error
sidequest.push_active_job("SendReceiptJob", [1], retries=3)  # error
sidequest.push_active_job("SendReceiptJob", [1], priority="high")  # error
'''


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """mypy --strict on USER_MODULE: (the module's text, mypy's output lines)."""
    folder = tmp_path_factory.mktemp("typing")
    source = textwrap.dedent(USER_MODULE).lstrip()
    (folder / "user_jobs.py").write_text(source, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--hide-error-context",
         "--show-error-codes", "--cache-dir", str(folder / ".mypy_cache"), "user_jobs.py"],
        cwd=folder, capture_output=True, text=True, timeout=300)
    assert "user_jobs.py" in result.stdout, f"mypy did not run: {result.stdout}{result.stderr}"
    return source, result.stdout.splitlines()


def _lines(report: list[str], kind: str) -> dict[int, list[str]]:
    found: dict[int, list[str]] = {}
    for line in report:
        match = re.match(rf"user_jobs\.py:(\d+): {kind}: (.*)", line)
        if match:
            found.setdefault(int(match.group(1)), []).append(match.group(2))
    return found


def _plain(revealed: str) -> str:
    """Spelled as mypy 2 does: older versions write `builtins.int` and `Union[str, None]`."""
    return re.sub(r"Union\[(\w+), None\]", r"\1 | None", revealed.replace("builtins.", ""))


def test_mypy_reports_exactly_the_wrong_calls(mypy_report: tuple[str, list[str]]) -> None:
    source, report = mypy_report
    marked = {n for n, text in enumerate(source.splitlines(), 1) if text.endswith("# error")}
    errors = _lines(report, "error")
    assert set(errors) == marked, "\n".join(report)
    assert len(marked) == 22


def test_reveal_type_shows_the_jobs_own_parameters(mypy_report: tuple[str, list[str]]) -> None:
    _, report = mypy_report
    revealed = [_plain(text) for texts in _lines(report, "note").values() for text in texts
                if text.startswith("Revealed type")]
    assert len(revealed) == 4, "\n".join(report)
    assert not any(re.search(r"\bAny\b", text) for text in revealed), "\n".join(revealed)
    send, send_async, resize_async, setter = revealed
    assert "JobFunction[[user_id: int], None]" in send
    assert "def (user_id: int) -> str | None" in send_async
    assert "def (path: str, width: int) -> str | None" in resize_async
    assert "JobSetter[[path: str, width: int]]" in setter


def test_the_package_ships_py_typed() -> None:
    assert (Path(sidequest.__file__).parent / "py.typed").is_file()
