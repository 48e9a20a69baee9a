"""`sidequest worker` as a real process: start-up, exit codes, signals and shutdown."""

import json
import signal
import subprocess

import pytest
from click.testing import CliRunner
from conftest import PYTHON, STARTUP, free_port, python_env, wait_until
from helpers import WorkerProcess, ran, reserved
from jobs_for_tests import blocker, echo, hooked_echo, sleepy

from sidequest import __version__
from sidequest.cli import main


def test_help_reads_well():
    runner = CliRunner()
    top = runner.invoke(main, ["--help"])
    assert top.exit_code == 0 and "worker" in top.output and "REDIS_URL" in top.output
    sub = runner.invoke(main, ["worker", "--help"])
    for flag in ("--require", "--queue", "--concurrency", "--timeout", "--config", "--tag",
                 "--verbose", "--logfile", "--pidfile", "NAME[,WEIGHT]", "TSTP"):
        assert flag in sub.output


def test_bad_flags_and_config_are_usage_errors(tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["worker", "-c", "0"])
    assert result.exit_code == 2 and "concurrency" in result.output.lower()
    result = runner.invoke(main, ["worker", "-q", "a,2", "-q", "b"])
    assert result.exit_code == 2 and "every queue a weight" in result.output
    bad = tmp_path / "sidekiq.yml"
    bad.write_text(":concurrency: lots\n")
    result = runner.invoke(main, ["worker", "-C", str(bad)])
    assert result.exit_code == 2 and "concurrency must be a whole number" in result.output


def run_cli(*args, redis_url="redis://127.0.0.1:1/0", timeout=STARTUP, cwd=None):
    return subprocess.run([PYTHON, "-m", "sidequest.cli", *args], env=python_env(REDIS_URL=redis_url),
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_import_error_in_required_module_exits_1():
    out = run_cli("worker", "-r", "no_such_module_xyz")
    assert out.returncode == 1 and "No module named 'no_such_module_xyz'" in out.stdout + out.stderr
    assert "check the -r name" in out.stdout + out.stderr


def test_a_required_module_that_fails_to_import_names_the_error_file_and_line(tmp_path):
    (tmp_path / "raises_at_import.py").write_text("import os\nraise RuntimeError('no config for ' + 'prod')\n")
    (tmp_path / "needs_a_dependency.py").write_text("import os\n\nimport no_such_dependency_xyz\n")
    (tmp_path / "bad_syntax.py").write_text("x = 1\ndef broken(:\n")
    cases = {"raises_at_import": ("RuntimeError: no config for prod", "line 2"),
             "needs_a_dependency": ("ModuleNotFoundError: No module named 'no_such_dependency_xyz'", "line 3"),
             "bad_syntax": ("SyntaxError: invalid syntax", "line 2")}
    for module, (error, line) in cases.items():
        out = run_cli("worker", "-r", module, cwd=tmp_path)
        text = (out.stdout + out.stderr).strip()
        assert out.returncode == 1 and len(text.splitlines()) <= 2 and "Traceback" not in text, text
        assert f"-r {module}:" in text and error in text and f"{tmp_path / module}.py, {line}" in text, text
        assert "check the -r name" not in text


def test_no_redis_exits_1_with_the_masked_url():
    out = run_cli("worker", redis_url=f"redis://:pw123@127.0.0.1:{free_port()}/0")
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "cannot reach Redis at redis://:****@127.0.0.1" in text
    assert "pw123" not in text


def test_start_line_then_clean_stop_on_term(redis_url, r, tmp_path):
    pidfile = tmp_path / "w.pid"
    w = WorkerProcess(redis_url, "-q", "critical,3", "-q", "default,1", "-c", "3", "-P", str(pidfile))
    ident = w.wait_registered(r)
    assert pidfile.read_text().strip() == str(w.proc.pid)
    w.signal(signal.SIGTERM)
    out = w.finish()
    assert w.proc.returncode == 0, out
    assert f"sidequest {__version__} starting: redis={redis_url} queues=[critical,3, default,1] concurrency=3" in out
    assert not r.sismember("processes", ident) and not r.exists(ident)
    assert not pidfile.exists()


def test_term_lets_running_jobs_finish_within_the_timeout(redis_url, r, client):
    w = WorkerProcess(redis_url, "-t", "10")
    w.wait_registered(r)
    client.push(sleepy, [0.5, "short"])
    wait_until(lambda: ran(r, "sleepy-start"))
    w.signal(signal.SIGTERM)
    out = w.finish()
    assert w.proc.returncode == 0, out
    assert ran(r, "sleepy-done") == [["short"]] and r.llen("queue:default") == 0


def test_term_requeues_unfinished_jobs_byte_for_byte(redis_url, r, client):
    client.push(blocker, ["never"])
    original = r.lrange("queue:default", 0, -1)[0]
    w = WorkerProcess(redis_url, "-t", "1")
    ident = w.wait_registered(r)
    wait_until(lambda: ran(r, "blocker-start"))
    w.signal(signal.SIGTERM)
    out = w.finish()
    assert w.proc.returncode == 0, out
    assert r.lrange("queue:default", 0, -1) == [original], out
    assert not reserved(r, ident)
    assert "putting 1 unfinished job(s) back" in out


def test_tstp_quiets_and_ttin_dumps_stacks(redis_url, r, client):
    w = WorkerProcess(redis_url)
    ident = w.wait_registered(r)
    w.signal(signal.SIGTTIN)
    w.signal(signal.SIGTSTP)
    wait_until(lambda: r.hget(ident, "quiet") == b"true", message="quiet in the process hash")
    client.push(echo, ["ignored while quiet"])
    out = w.stop()
    assert w.proc.returncode == 0
    assert "sidequest-heartbeat" in out and "SIGTSTP received" in out and "quiet: finishing running jobs" in out
    assert not ran(r) and r.llen("queue:default") == 1


def test_config_file_and_logfile(redis_url, r, client, tmp_path):
    cfg = tmp_path / "sidekiq.yml"
    cfg.write_text(":concurrency: 2\n:queues:\n  - [images, 1]\n  - [default, 1]\n:tag: fromfile\n")
    log = tmp_path / "worker.log"
    w = WorkerProcess(redis_url, "-C", str(cfg), "-L", str(log))
    ident = w.wait_registered(r)
    info = json.loads(r.hget(ident, "info"))
    assert info["concurrency"] == 2 and info["tag"] == "fromfile" and info["queues"] == ["images", "default"]
    client.push("Resize", ["x.png", 1], queue="images")
    wait_until(lambda: ran(r, "resize"))
    w.stop()
    text = log.read_text()
    assert "class=Resize jid=" in text and "done:" in text


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_jobs_log_lines_carry_its_class_jid_queue_and_trace_id(redis_url, r, client, tmp_path, fmt):
    log = tmp_path / "worker.log"
    w = WorkerProcess(redis_url, "-q", "images", "--log-format", fmt, "-L", str(log))
    w.wait_registered(r)
    traced = client.push("Resize", ["x.png", 1], queue="images", custom={"traceparent": TRACEPARENT})
    plain = client.push("Resize", ["y.png", 2], queue="images")
    wait_until(lambda: len(ran(r, "resize")) == 2)
    w.stop()
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    if fmt == "json":
        records = [json.loads(line) for line in lines]
        mine = [x for x in records if x.get("jid") == traced]
        assert mine and all(x["class"] == "Resize" and x["queue"] == "images" and
                            x["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736" for x in mine)
        assert {x["msg"].split(":")[0] for x in mine} >= {"start", "done"}
        other = [x for x in records if x.get("jid") == plain]
        assert other and all(x["queue"] == "images" and "trace_id" not in x for x in other)
        assert all("jid" not in x for x in records if "starting" in x["msg"])  # outside a job: none
    else:
        mine = [line for line in lines if f"jid={traced}" in line]
        assert mine and all("class=Resize" in line and " queue=images" in line and
                            " trace_id=4bf92f3577b34da6a3ce929d0e0e4736" in line for line in mine)
        other = [line for line in lines if f"jid={plain}" in line]
        assert other and all(" queue=images" in line and "trace_id" not in line for line in other)


def test_configure_worker_hooks_add_middleware_and_death_handlers(redis_url, r, client):
    w = WorkerProcess(redis_url)
    try:
        w.wait_registered(r)
        ok = client.push(hooked_echo, [])
        dead = client.push(hooked_echo, [True])
        wait_until(lambda: ran(r, "death-handler"), message="the death handler")
        wait_until(lambda: len(ran(r, "middleware")) == 2)
    finally:
        w.stop()
    assert sorted(x[0] for x in ran(r, "middleware")) == sorted([ok, dead])
    assert ran(r, "death-handler") == [[dead, "LookupError"]]


def test_a_second_worker_refuses_a_pidfile_a_live_worker_holds(redis_url, r, tmp_path):
    pidfile = tmp_path / "w.pid"
    first = WorkerProcess(redis_url, "-P", str(pidfile))
    try:
        first.wait_registered(r)
        out = run_cli("worker", "-r", "jobs_for_tests", "-P", str(pidfile), redis_url=redis_url, timeout=20)
        lines = (out.stdout + out.stderr).strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1, lines
        assert f"process {first.proc.pid} is running with this pidfile" in lines[0] and "-P/--pidfile" in lines[0]
        assert pidfile.read_text().strip() == str(first.proc.pid) and first.proc.poll() is None
    finally:
        first.stop()
    assert first.proc.returncode == 0 and not pidfile.exists()


def test_a_stale_pidfile_is_taken_over_and_a_replaced_one_is_left_alone(redis_url, r, tmp_path):
    pidfile = tmp_path / "w.pid"
    gone = subprocess.Popen([PYTHON, "-c", "pass"])
    gone.wait()
    pidfile.write_text(f"{gone.pid}\n")  # the pid of a process that has exited
    w = WorkerProcess(redis_url, "-P", str(pidfile))
    try:
        w.wait_registered(r)
        assert pidfile.read_text().strip() == str(w.proc.pid)
        pidfile.write_text("4242\n")  # someone else's now: not ours to delete
    finally:
        out = w.stop()
    assert w.proc.returncode == 0, out
    assert pidfile.read_text() == "4242\n"


def test_worker_takes_redis_url_like_every_other_command(redis_url, r):
    # REDIS_URL names a port nothing listens on: the flag wins, as in the admin commands
    w = WorkerProcess(f"redis://127.0.0.1:{free_port()}/0", "--redis-url", redis_url)
    try:
        w.wait_registered(r)
    finally:
        out = w.stop()
    assert w.proc.returncode == 0, out
    assert f"redis={redis_url}" in out


def test_rediss_to_a_plain_redis_is_one_line_at_once(redis_url):
    out = run_cli("worker", redis_url=redis_url.replace("redis://", "rediss://"), timeout=20)
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, lines
    assert "did not answer TLS" in lines[0] and "use redis://" in lines[0]


def test_processes_takes_auto_or_a_count_and_says_so_for_anything_else():
    result = CliRunner().invoke(main, ["worker", "--processes", "many"])
    assert result.exit_code == 2
    assert "'many' is not 'auto' or a whole number of processes" in result.output
    assert "Traceback" not in result.output
