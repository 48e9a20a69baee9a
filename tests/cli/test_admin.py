"""The admin commands (`sidequest stats`, `queues`, `retries|scheduled|dead`, `processes`, `enqueue`,
`tasks show`, `top`) in-process with click's CliRunner, on real jobs run by a real worker."""

import json
import subprocess

import pytest
from click.testing import CliRunner
from conftest import PYTHON, STARTUP, free_port, python_env, wait_until
from helpers import cli_ok as ok
from helpers import queue_items, ran
from jobs_for_tests import FastBoom, boom, echo, sleepy

from sidequest import Task
from sidequest.api import DeadSet, ProcessSet, Queue, RetrySet, ScheduledSet, Workers
from sidequest.cli import main
from sidequest.store.connection import answers


def as_json(result):
    return json.loads(ok(result))


def headers_in(output: str, *names: str) -> bool:
    """The header names are on one line, in order (an aligned table's header row)."""
    return any(all(n in line for n in names) and [line.index(n) for n in names] == sorted(line.index(n) for n in names)
               for line in output.splitlines())


@pytest.fixture
def failed(client, start):
    """Two Boom jobs waiting in `retry` (their next try is 15 s or more away), one FastBoom in
    `dead` (it fails three times, 0.05 s apart), one Echo in `schedule`; the worker stopped."""
    jids = {"b1": client.push(boom, ["b1"]), "b2": client.push(boom, ["b2"]), "fast": client.push(FastBoom, ["f"]),
            "later": client.push(echo, ["later"], in_=3600)}
    launcher = start()
    wait_until(lambda: RetrySet(client).size == 2 and DeadSet(client).size == 1, message="two retries, one dead")
    launcher.stop()
    return jids


# -- reading --------------------------------------------------------------------------------------
def test_stats_shows_totals_queues_and_history_and_json(cli, failed):
    text = ok(cli("stats"))
    assert "Totals" in text and headers_in(text, "QUEUE", "SIZE", "LATENCY", "PAUSED")
    assert headers_in(text, "DAY (UTC)", "PROCESSED", "FAILED")
    data = as_json(cli("stats", "--json", "--days", "3"))
    assert (data["retry_size"], data["dead_size"], data["scheduled_size"]) == (2, 1, 1)
    assert data["processed"] == data["failed"] == 5  # Boom twice, FastBoom three times
    assert len(data["history"]["processed"]) == 3 and sum(data["history"]["failed"].values()) == 5
    assert data["queues"][0]["name"] == "default" and isinstance(data["periodic"], list)


def test_stats_shows_what_debounce_replaced_and_throttle_dropped(cli, client):
    assert "Debounce and throttle" not in ok(cli("stats"))  # nothing counted: no table
    for note in ("a", "b", "c"):
        client.push(echo, [1, note], debounce=30, key=lambda n, note: n)  # the same n: the same push
        client.push(echo, [2, note], throttle=60, key=lambda n, note: n)
    text = ok(cli("stats"))
    assert "Debounce and throttle" in text and headers_in(text, "JOB", "REPLACED (DEBOUNCE)", "DROPPED (THROTTLE)")
    assert as_json(cli("stats", "--json"))["flow"] == {"Echo": {"replaced": 2, "dropped": 2}}


def test_queues_lists_and_shows_jobs_as_text_never_markup(cli, client):
    jids = [client.push(echo, [1, "[bold]x[/bold]"], queue="mail"), client.push(echo, [2], queue="mail")]
    text = ok(cli("queues"))
    assert headers_in(text, "QUEUE", "SIZE", "LATENCY", "PAUSED") and "mail" in text
    assert as_json(cli("queues", "--json")) == {"queues": [
        {"name": "mail", "size": 2, "latency": pytest.approx(0, abs=5), "paused": False}]}
    shown = ok(cli("queues", "show", "mail"))
    assert headers_in(shown, "JID", "CLASS", "ARGS", "QUEUE", "ENQUEUED")
    assert all(jid in shown for jid in jids) and '"[bold]x[/bold]"' in shown
    data = as_json(cli("queues", "show", "mail", "--limit", "1", "--json"))
    assert data["size"] == 2 and [j["jid"] for j in data["jobs"]] == [jids[1]]  # newest first


def test_retries_list_and_show_one_with_its_error_and_backtrace(cli, failed):
    text = ok(cli("retries"))
    assert headers_in(text, "JID", "CLASS", "ARGS", "QUEUE", "NEXT RETRY", "RETRIES", "ERROR")
    assert failed["b1"] in text and failed["b2"] in text and "ValueError: b1" in text
    data = as_json(cli("retries", "list", "--json"))
    assert data["set"] == "retry" and data["size"] == 2
    assert {j["jid"] for j in data["jobs"]} == {failed["b1"], failed["b2"]}
    assert as_json(cli("retries", "list", "--grep", '"b2"', "--json"))["jobs"][0]["jid"] == failed["b2"]
    shown = ok(cli("retries", "show", failed["b1"]))
    assert "ValueError: b1" in shown and "backtrace" in shown and "next retry" in shown
    one = as_json(cli("retries", "show", failed["b1"], "--json"))
    assert one["class_name"] == "Boom" and one["error_message"] == "b1" and len(one["error_backtrace"]) >= 1
    dead = ok(cli("dead"))
    assert headers_in(dead, "JID", "CLASS", "DIED", "ERROR") and failed["fast"] in dead
    scheduled = ok(cli("scheduled"))
    assert headers_in(scheduled, "JID", "CLASS", "RUNS") and failed["later"] in scheduled


# -- acting on one job or on a filter ----------------------------------------------------------------
def test_retry_delete_and_kill_one_job_by_jid(cli, client, failed):
    assert f"job {failed['b1']} retried" in ok(cli("retries", "retry", failed["b1"]))
    assert [j["jid"] for j in queue_items(client.redis)] == [failed["b1"]]
    assert RetrySet(client).find_job(failed["b1"]) is None
    assert as_json(cli("retries", "kill", failed["b2"], "--json")) == {
        "set": "retries", "action": "kill", "moved": 1, "jid": failed["b2"]}
    assert RetrySet(client).size == 0 and DeadSet(client).find_job(failed["b2"]) is not None
    ok(cli("dead", "delete", failed["fast"]))
    assert DeadSet(client).find_job(failed["fast"]) is None and DeadSet(client).size == 1
    assert "queued to run now" in ok(cli("scheduled", "retry", failed["later"]))  # scheduled: run now
    assert ScheduledSet(client).size == 0 and failed["later"] in [j["jid"] for j in queue_items(client.redis)]


def test_actions_by_class_grep_and_all(cli, client, failed):
    assert as_json(cli("retries", "kill", "--class", "Boom", "--json"))["moved"] == 2
    assert RetrySet(client).size == 0 and DeadSet(client).size == 3
    assert '1 job of the dead set retried (class Boom and matching "b2")' in ok(
        cli("dead", "retry", "--class", "Boom", "--grep", '"b2"'))
    assert [j["jid"] for j in queue_items(client.redis)] == [failed["b2"]]
    assert as_json(cli("dead", "delete", "--class", "NoSuchJob", "--json"))["moved"] == 0
    assert "2 jobs of the dead set deleted" in ok(cli("dead", "delete", "--all"))
    assert DeadSet(client).size == 0


def test_queues_pause_unpause_and_clear(cli, client):
    client.push(echo, [1], queue="mail")
    client.push(echo, [2], queue="mail")
    assert "paused queue mail" in ok(cli("queues", "pause", "mail"))
    assert Queue("mail", client).paused and as_json(cli("queues", "--json"))["queues"][0]["paused"] is True
    assert "paused" in ok(cli("queues"))
    ok(cli("queues", "unpause", "mail"))
    assert not Queue("mail", client).paused
    assert as_json(cli("queues", "clear", "mail", "--json")) == {"queue": "mail", "action": "clear", "deleted": 2}
    assert Queue("mail", client).size == 0 and "no queues" in ok(cli("queues"))


def test_enqueue_by_name_with_json_args_and_a_worker_runs_it(cli, client, r, start):
    out = ok(cli("enqueue", "Echo", '[1, "two", {"three": 3}]'))
    assert out.startswith("enqueued Echo jid=") and "on queue default" in out
    mail = as_json(cli("enqueue", "Echo", "[4]", "-q", "mail", "--json"))
    assert mail["queue"] == "mail" and queue_items(r, "mail")[0]["jid"] == mail["jid"]
    later = as_json(cli("enqueue", "Echo", "[5]", "--in", "600", "--json"))
    assert ScheduledSet(client).find_job(later["jid"]) is not None
    resize = as_json(cli("enqueue", "-r", "jobs_for_tests", "Resize", '["a.png", 100]', "--json"))
    assert resize["queue"] == "images" and queue_items(r, "images")[0]["args"] == ["a.png", 100]
    start()
    wait_until(lambda: ran(r, "echo"), message="the enqueued Echo ran")
    assert ran(r, "echo") == [[1, "two", {"three": 3}]]


# -- processes, tasks, top ---------------------------------------------------------------------------
def test_processes_list_running_jobs_then_quiet_and_stop_one(cli, client, start):
    launcher = start()
    jid = client.push(sleepy, [3, "s"])
    wait_until(lambda: Workers(client).find_work(jid), message="the job running")
    text = ok(cli("processes"))
    assert headers_in(text, "IDENTITY", "TAG", "BUSY", "RSS", "BEAT", "STARTED", "QUEUES", "STATE")
    assert launcher.identity in text and "Running" in text and jid in text
    data = as_json(cli("processes", "--json"))
    assert [p["identity"] for p in data["processes"]] == [launcher.identity]
    assert data["running"][0]["jid"] == jid and data["running"][0]["class_name"] == "Sleepy"
    prefix = launcher.identity.rsplit(":", 1)[0]  # host:pid, without the nonce
    assert f"asked {launcher.identity} to finish running jobs" in ok(cli("processes", "quiet", prefix))
    wait_until(lambda: ProcessSet(client).get(launcher.identity).stopping, message="the process quiet")
    assert "quiet" in ok(cli("processes"))
    assert as_json(cli("processes", "stop", "--all", "--json")) == {"action": "stop",
                                                                    "processes": [launcher.identity]}
    assert launcher.wait(15)


def test_tasks_show_progress_counts_and_events(cli, client, start):
    task = Task.create("import", meta={"file": "a.csv"}, client=client)
    jids = [task.add(echo, n) for n in range(3)]
    task.seal()
    start()
    wait_until(lambda: Task.find(task.id, client).status()["done"], message="the task done")
    text = ok(cli("tasks", "show", task.id))
    assert "100.0% of 3 jobs (done)" in text and "3 finished" in text
    assert headers_in(text, "JID", "CLASS", "STATUS", "PARAMS") and all(jid in text for jid in jids)
    data = as_json(cli("tasks", "show", task.id, "--status", "finished", "--limit", "2", "--json"))
    assert data["counts"]["finished"] == 3 and data["meta"] == {"file": "a.csv"} and len(data["events"]) == 2


def test_top_once_renders_one_frame(cli, client, start):
    launcher = start()
    jid = client.push(sleepy, [3, "t"])
    client.push(echo, [1], queue="idle")
    wait_until(lambda: Workers(client).find_work(jid), message="the job running")
    text = ok(cli("top", "--once"))
    assert text.startswith("sidequest top") and "processed" in text
    assert headers_in(text, "QUEUE", "SIZE", "LATENCY") and "idle" in text
    assert headers_in(text, "IDENTITY", "BUSY") and launcher.identity in text
    assert headers_in(text, "PROCESS", "JID", "CLASS", "FOR") and jid in text


# -- errors -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["retries", "show", "0123456789abcdef01234567"], "no job 0123456789abcdef01234567 in the retry set"),
    (["dead", "retry", "0123456789abcdef01234567"], "no job"),
    (["retries", "retry"], "needs a JID, --all, or --class NAME/--grep TEXT"),
    (["scheduled", "delete"], "needs a JID"),
    (["retries", "retry", "0123456789abcdef01234567", "--all"], "not both"),
    (["retries", "kill", "--all", "--class", "Boom"], "--all acts on every job"),
    (["retries", "frob"], "unknown retries action 'frob'"),
    (["retries", "--limit", "0"], "--limit"),
    (["queues", "frob", "mail"], "unknown queues action 'frob'"),
    (["queues", "pause"], "needs a queue NAME"),
    (["queues", "clear", "nosuchqueue"], "no queue named 'nosuchqueue'"),
    (["enqueue", "Echo", "[1, 2"], "ARGS_JSON is not JSON"),
    (["enqueue", "Echo", '{"a": 1}'], "must be a JSON array"),
    (["enqueue", "-r", "jobs_for_tests", "Resize", "[1]"], "missing a required argument"),
    (["enqueue", "-r", "jobs_for_tests", "NoSuchJob"], "no job named 'NoSuchJob'"),
    (["processes", "quiet"], "needs a process ID or --all"),
    (["processes", "stop", "nosuchhost:1"], "no process 'nosuchhost:1'"),
    (["tasks", "show", "nosuchtask"], "no task 'nosuchtask'"),
    (["tasks"], "`tasks` needs an action"),
])
def test_user_errors_are_one_line_and_exit_2(cli, args, says):
    result = cli(*args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in result.output


def test_no_redis_is_one_line_and_exit_1_and_starts_no_embedded_server(monkeypatch):
    runner = CliRunner()
    monkeypatch.setenv("REDIS_URL", f"redis://:pw123@127.0.0.1:{free_port()}/0")
    result = runner.invoke(main, ["stats"])
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert "cannot reach Redis at redis://:****@127.0.0.1" in result.output and "pw123" not in result.output
    monkeypatch.delenv("REDIS_URL")
    port = free_port()
    monkeypatch.setenv("SIDEQUEST_EMBEDDED_PORT", str(port))
    result = runner.invoke(main, ["retries", "--json"])
    assert result.exit_code == 1 and "never start the embedded Redis" in result.output
    assert not answers(f"redis://127.0.0.1:{port}/0")
    result = runner.invoke(main, ["stats", "--redis-url", "http://127.0.0.1:1/"])
    assert result.exit_code == 2 and "invalid Redis URL" in result.output


def test_python_dash_m_runs_the_admin_commands(redis_url, client):
    client.push(echo, [1])
    out = subprocess.run([PYTHON, "-m", "sidequest.cli", "stats", "--json"], env=python_env(REDIS_URL=redis_url),
                         capture_output=True, text=True, timeout=STARTUP)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["enqueued"] == 1


def test_top_says_so_when_redis_stops_answering_and_keeps_going():
    from conftest import RedisServer, redis_server_binary
    from rich.console import Console

    from sidequest import Client, Config
    from sidequest.cli.admin.top import Top

    server = RedisServer(redis_server_binary())
    try:
        view = Top(Client(Config(redis_url=server.url())))
        console = Console(width=200, record=True)
        console.print(view.frame())
        assert "sidequest top" in console.export_text()
        server.halt()
        console.print(view.frame())
        assert "did not answer" in console.export_text()
    finally:
        server.stop()


def test_top_redraws_in_a_terminal_until_ctrl_c_then_exits_0(redis_url):
    import os
    import pty
    import select
    import signal
    import time

    pid, fd = pty.fork()
    if pid == 0:  # the child: `sidequest top` on a terminal
        try:
            # As a shell on a terminal starts it: with Ctrl-C's default action. Run from a
            # background job (`make test &`, nohup, some CI runners) this process may ignore
            # SIGINT, and Python keeps an inherited "ignore": top would never see the Ctrl-C.
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.execve(PYTHON, [PYTHON, "-m", "sidequest.cli", "top", "--interval", "0.3"],
                      python_env(REDIS_URL=redis_url, COLUMNS="160", LINES="50"))
        finally:
            os._exit(127)  # never back into the test runner's code in a forked copy of it
    output = b""
    closed = False
    status: int | None = None

    def read_until(done, timeout: float, what: str) -> str:
        """Read the terminal until `done(text)` holds; fail with what it showed at the deadline."""
        nonlocal output, closed
        deadline = time.monotonic() + timeout
        while not done(output.decode("utf-8", "replace")):
            assert not closed and time.monotonic() < deadline, \
                f"no {what} after {timeout} s; the terminal showed:\n{output.decode('utf-8', 'replace')}"
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # the child closed the terminal
                    chunk = b""
                closed = not chunk
                output += chunk
        return output.decode("utf-8", "replace")

    def reaped() -> tuple[int] | None:
        done, status = os.waitpid(pid, os.WNOHANG)
        return (status,) if done else None

    try:
        # Ctrl-C only once frames show: sent earlier, it could reach a child that has not yet
        # made the terminal its own (lost) or is still importing (a traceback, not a clean exit).
        read_until(lambda text: text.count("sidequest top") >= 3, 60, "three frames")
        os.write(fd, b"\x03")  # Ctrl-C, as the terminal sends it
        text = read_until(lambda _: closed, 60, "exit after Ctrl-C")
        [status] = wait_until(reaped, 30, 0.05, "sidequest top to exit")
    finally:
        if status is None:  # it did not exit: do not leave it running
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0 and "Traceback" not in text
    assert text.count("sidequest top") >= 3 and "\x1b[1A\x1b[2K" in text  # redrawn in place: cursor up, erase


def test_web_without_a_redis_url_uses_no_embedded_server_and_says_to_set_one(tmp_path):
    """Issue 28 item 15: `sidequest web` started the embedded Redis when REDIS_URL was unset, so a
    dashboard deployed without it showed an empty new Redis. Like the admin commands, it uses the
    Redis on localhost at the embedded port if one answers, else says in one line to set REDIS_URL."""
    port = free_port()
    env = {k: v for k, v in python_env(SIDEQUEST_EMBEDDED_PORT=str(port)).items()
           if k not in ("REDIS_URL", "SIDEQUEST_REDIS_URL")}
    web = subprocess.Popen([PYTHON, "-m", "sidequest.cli", "web", "--port", str(free_port())], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = web.communicate(timeout=STARTUP)
        lines = out.strip().splitlines()
        assert web.returncode == 1 and len(lines) == 1, out
        assert "set REDIS_URL" in lines[0] and "`sidequest web` never starts the embedded Redis" in lines[0], out
        assert not answers(f"redis://127.0.0.1:{port}/0") and not (tmp_path / ".sidequest").exists()
    finally:  # the unfixed command started an embedded server, then served the dashboard
        if web.poll() is None:
            web.kill()
            web.wait()
        if answers(f"redis://127.0.0.1:{port}/0"):
            import redis

            try:
                redis.Redis(port=port).shutdown(nosave=True)
            except redis.ConnectionError:
                pass
