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
        "ChainResult",
        "Client",
        "Config",
        "ConfigError",
        "CurrentJob",
        "CurrentStep",
        "EventError",
        "GroupResult",
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
        "Retry",
        "SidequestError",
        "Signature",
        "StepError",
        "Suspended",
        "Task",
        "UnknownJobError",
        "WaitTimeout",
        "WorkerSetup",
        "Workflow",
        "aio",
        "asleep",
        "astep",
        "await_for",
        "cancel",
        "cancelled",
        "chain",
        "chord",
        "configure",
        "configure_worker",
        "current_job",
        "current_step",
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
        "send_event",
        "sleep",
        "status",
        "step",
        "task_message",
        "wait_for",
        "workflow",
    ]
    assert all(hasattr(sidequest, name) for name in sidequest.__all__)


USER_MODULE = '''
from datetime import datetime, timedelta, timezone
from typing import Literal

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


class Picky(sidequest.Job, retry_on=(ConnectionError,), discard_on=KeyError):
    def perform(self) -> None:
        raise sidequest.Retry(in_=timedelta(seconds=30), exc=TimeoutError())

    def retry_in(self, count: int, exc: BaseException) -> float | Literal["kill", "discard"] | None:
        return "kill"


@sidequest.job(retry_on=(ValueError,), retry_in=lambda count, exc: "discard")
def picky(n: int) -> int:
    job = sidequest.current_job()
    return 0 if job is None else job.retry_count


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
send.set(retry_on=(ValueError,))  # error
sidequest.push_active_job("SendReceiptJob", [1], retries=3)  # error
sidequest.push_active_job("SendReceiptJob", [1], priority="high")  # error
'''


@pytest.fixture(scope="module")
def mypy_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    """mypy --strict on USER_MODULE: (the module's text, mypy's output lines)."""
    source, result = run_mypy(USER_MODULE, tmp_path_factory.mktemp("typing"), "user_jobs.py")
    assert "user_jobs.py" in result.stdout, f"mypy did not run: {result.stdout}{result.stderr}"
    return source, result.stdout.splitlines()


def run_mypy(module: str, folder: Path, name: str) -> tuple[str, subprocess.CompletedProcess[str]]:
    """mypy --strict, as a user runs it, on `module`'s text saved as `folder/name`: (the text, the run)."""
    source = textwrap.dedent(module).lstrip()
    (folder / name).write_text(source, encoding="utf-8")
    return source, subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--hide-error-context",
         "--show-error-codes", "--cache-dir", str(folder / ".mypy_cache"), name],
        cwd=folder, capture_output=True, text=True, timeout=300)


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
    assert len(marked) == 23


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


CANVAS_MODULE = '''
import sidequest


@sidequest.job
def sub(x: int, y: int) -> int:
    return x - y


@sidequest.job
def notify(results: list[int], channel: str, *, urgent: bool = False) -> None:
    ...


class Resize(sidequest.Job):
    def perform(self, path: str, width: int) -> None:
        ...


sidequest.chain(sub.s(10, 1), sub.s(100))
sidequest.chord([sub.s(1, 2), sub.s(3, 4)], notify.s("ops", urgent=True))
Resize.s("a.png", 200)
Resize.s(200)
sub.set(queue="math").s(100)
sub.si(1, 2)
values: list[object] = sidequest.group([sub.si(1, 2)]).apply_async().get(timeout=10)
again: list[object] = sidequest.GroupResult("id").get(timeout=None)
last: sidequest.ChainResult = sidequest.chain(sub.s(10, 1), sub.s(100)).apply_async()
called: sidequest.ChainResult = sidequest.chain(sub.s(10, 1), sub.s(100))()
fanned: sidequest.GroupResult = sidequest.group(sub.si(1, 2), sub.si(3, 4))()
piped: sidequest.ChainResult = (sidequest.group(sub.si(1, 2)) | notify.s("ops"))()
one: str | None = sub.s(1).delay(2)
sub.s(1, 2).apply_async(priority=9, countdown=5, queue="math")
(sub.s(10, 1) | sub.s(100)).apply_async()

sub.s("x")  # error
sub.s(1, 2, 3)  # error
notify.s("ops", urgnt=True)  # error
notify.s(3)  # error
Resize.s("a.png")  # error
Resize.set(queue="big").s("wide")  # error
sub.set(queue="math").s("x")  # error
sub.si(1)  # error
sub.s(1, 2).apply_async(priority="high")  # error
sub.s(1, 2).apply_async(link=sub.s(3))  # error
'''


def test_mypy_checks_a_steps_arguments_in_celerys_order(tmp_path: Path) -> None:
    """Issue 30 item 2: `.s()` took `*args: Any`, as the result came last and typing cannot drop a
    ParamSpec's last parameter. With the result first, `Concatenate` drops it: a step is checked
    with all of its job's arguments (a first step) or all but the first (a step after others)."""
    source, result = run_mypy(CANVAS_MODULE, tmp_path, "user_jobs.py")
    marked = {n for n, text in enumerate(source.splitlines(), 1) if text.endswith("# error")}
    assert set(_lines(result.stdout.splitlines(), "error")) == marked, result.stdout + result.stderr
    assert len(marked) == 10


def test_the_package_ships_py_typed() -> None:
    assert (Path(sidequest.__file__).parent / "py.typed").is_file()


KEYWORDS_MODULE = '''
from datetime import datetime, timedelta, timezone

import sidequest


@sidequest.job
def mail(user_id: int, *, template: str = "welcome") -> None:
    ...


class Resize(sidequest.Job):
    def perform(self, path: str, *, width: int = 100) -> None:
        ...


mail.perform_async(1, template="reset")
mail.perform_in(60, 1, template="reset")
mail.set(queue="urgent").perform_async(1, template="reset")
mail.delay(1, template="reset")
mail.set(queue="urgent").delay(1)
mail.apply_async([1], {"template": "reset"}, countdown=60, queue="urgent", expires=timedelta(hours=1))
mail.apply_async((1,), eta=datetime.now(timezone.utc), expires=datetime.now(timezone.utc))
Resize.perform_async("a.png", width=200)
Resize.delay("a.png", width=200)
Resize.apply_async(["a.png"], {"width": 200})
Resize.set(queue="urgent").apply_async(["a.png"], countdown=5.5)
mail.apply_async([1], priority=9, time_limit=30)
sidequest.push("app.mail", [1], kwargs={"template": "reset"})
jid: str | None = mail.delay(1)


async def produce() -> None:
    await mail.aio.perform_async(1, template="reset")


mail.perform_async(1, template=2)  # error
mail.perform_async(1, templat="reset")  # error
mail.set(queue="urgent").perform_in(60, 1, template=None)  # error
mail.delay("x")  # error
mail.delay(1, template=3)  # error
Resize.perform_async("a.png", width="wide")  # error
Resize.delay("a.png", height=1)  # error
mail.apply_async([1], countdown="soon")  # error
mail.apply_async([1], queue=3)  # error
mail.apply_async([1], retry_policy={"max_retries": 3})  # error
mail.apply_async([1], contdown=5)  # error


async def produce_wrong() -> None:
    await mail.aio.perform_async(1, template=2)  # error
'''


def test_mypy_flags_a_keyword_argument_of_the_wrong_type_or_name(tmp_path: Path) -> None:
    """Keyword arguments are typed from the job's own parameters (the ParamSpec's P.kwargs), as
    positional ones are; Celery's delay and apply_async are typed too."""
    source, result = run_mypy(KEYWORDS_MODULE, tmp_path, "user_keywords.py")
    assert "user_keywords.py" in result.stdout or result.returncode == 0, result.stdout + result.stderr
    errors = {int(m.group(1)) for m in re.finditer(r"user_keywords\.py:(\d+): error", result.stdout)}
    marked = {n for n, text in enumerate(source.splitlines(), 1) if text.endswith("# error")}
    assert errors == marked and len(marked) == 12, result.stdout
    assert 'Argument "template" to "perform_async" of "JobFunction" has incompatible type "int"' in result.stdout
