"""sidequest.contrib.django with real Django, a real SQLite file, a real Redis and real
`manage.py sidequest worker` processes, on the example shop in tests/django_project.

Django is set up once for this module (it cannot be set up twice in a process), on a database
file of the module's own; each test gets its own Redis database, made the default client's.
Workers are subprocesses that read the same file, with SIDEQUEST's redis_url (SHOP_REDIS_URL)
pointing at the test's Redis while REDIS_URL points nowhere, so only the setting can reach it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest
import redis
from client.test_push_plan import TIMEOUT as REPLICA_WAIT
from client.test_push_plan import frozen, replicated, warm_up
from conftest import PYTHON, ROOT, STARTUP, python_env, wait_until

django = pytest.importorskip("django", reason="the django extra is not installed")
try:  # the example shop's TASKS needs a task framework: Django 6's own, else the backport
    import django.tasks
except ImportError:
    pytest.importorskip("django_tasks", reason="neither django.tasks (Django 6) nor django-tasks is installed")

from asgiref.sync import sync_to_async  # noqa: E402  (Django's dependency)

import sidequest  # noqa: E402
from sidequest import Config  # noqa: E402
from sidequest.store import keys  # noqa: E402

PROJECT = ROOT / "tests" / "django_project"
NOWHERE = "redis://127.0.0.1:1/0"  # REDIS_URL in workers: only SIDEQUEST's redis_url leads to the test's Redis
KNOBS = ["--heartbeat-interval", "0.5", "--heartbeat-ttl", "2", "--poll-interval", "0.2", "-t", "5"]


@pytest.fixture(scope="module")
def shop_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Django set up on the example shop, its tables migrated into an SQLite file."""
    db = tmp_path_factory.mktemp("shop") / "shop.sqlite3"
    os.environ["SHOP_DB"] = str(db)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shopsite.settings")
    if str(PROJECT) not in sys.path:
        sys.path.insert(0, str(PROJECT))
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return db


@pytest.fixture
def shop(shop_db: Path, redis_url: str):
    """The shop on this test's Redis: the default client (what SIDEQUEST configured) points at it."""
    from django.db import connections

    previous = sidequest.default_client()
    sidequest.configure(Config(redis_url=redis_url))
    yield shop_db
    sidequest.configure(client=previous)
    connections.close_all()


class Manage:
    """`python manage.py sidequest ARGS` in the shop's folder, its output in a log file."""

    def __init__(self, log_dir: Path, db: Path, redis_url: str, *args: str,
                 extra: dict[str, str] | None = None) -> None:
        self.log_path = log_dir / f"manage-{time.monotonic_ns()}.log"
        env = python_env(SHOP_DB=str(db), SHOP_REDIS_URL=redis_url, REDIS_URL=NOWHERE,
                         DJANGO_SETTINGS_MODULE="shopsite.settings", SIDEQUEST_FETCH_TIMEOUT="0.5", **(extra or {}))
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([PYTHON, "manage.py", "sidequest", *args], cwd=PROJECT, env=env,
                                         stdout=log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_registered(self, r) -> dict:
        """The worker's heartbeat info, once it is in Redis (a supervisor's: its first child's)."""
        def find():
            assert self.proc.poll() is None, f"worker exited early:\n{self.output()}"
            for raw in r.smembers("processes"):
                info = r.hget(raw, "info")
                if info:
                    return json.loads(info)
            return None
        return wait_until(find, STARTUP, 0.1, "the worker to register")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STARTUP)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"manage.py did not exit after TERM:\n{self.output()}") from None


@pytest.fixture
def manage(shop: Path, redis_url: str, tmp_path: Path):
    started: list[Manage] = []

    def run(*args: str, extra: dict[str, str] | None = None) -> Manage:
        process = Manage(tmp_path, shop, redis_url, *args, extra=extra)
        started.append(process)
        return process

    yield run
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait()


def worker(manage, *args: str, **kwargs) -> Manage:
    return manage("worker", *KNOBS, *args, **kwargs)


def new_order(total: int = 12):
    from orders.models import Order

    return Order.objects.create(number=uuid.uuid4().hex[:12], total=total)


# -- settings ----------------------------------------------------------------------------------

def test_sidequest_setting_maps_onto_config_and_round_trips_through_the_cli_environment(shop_db):
    from sidequest.contrib.django.conf import cli_environment, config_from_settings
    from sidequest.contrib.django.worker import CloseOldConnections

    given = {"redis_url": "redis://example:6379/3", "queues": ["critical,3", "default,1"], "concurrency": 3,
             "timeout": 7.5, "labels": ["a", "b"], "pin_cpu": False, "job_timeout": None,
             "server_middleware": ["sidequest.contrib.django.worker.CloseOldConnections"]}
    config = config_from_settings(given, environ={})
    assert (config.redis_url, config.queues, config.concurrency, config.timeout, config.labels) == (
        "redis://example:6379/3", (("critical", 3), ("default", 1)), 3, 7.5, ("a", "b"))
    assert list(config.server_middleware) == [CloseOldConnections]
    env = cli_environment(given, config)
    assert "SIDEQUEST_SERVER_MIDDLEWARE" not in env and env["SIDEQUEST_JOB_TIMEOUT"] is None
    read_back = Config.from_env({k: v for k, v in env.items() if v is not None})
    for key in given:
        if key != "server_middleware":
            assert getattr(read_back, key) == getattr(config, key), key


def test_the_result_ttl_setting_is_every_jobs_default(shop_db):
    """Issue 30 item 5: `SIDEQUEST = {"result_ttl": ...}` is the process-wide default of the job
    option, and reaches the CLI's environment."""
    from sidequest.contrib.django.conf import cli_environment, config_from_settings

    config = config_from_settings({"result_ttl": 3600}, environ={})
    assert config.result_ttl == 3600
    assert Config.from_env(cli_environment({"result_ttl": 3600}, config)).result_ttl == 3600.0


def test_an_unknown_setting_is_refused_naming_the_nearest(shop_db):
    from django.core.exceptions import ImproperlyConfigured

    from sidequest.contrib.django.conf import config_from_settings

    with pytest.raises(ImproperlyConfigured, match=r"^SIDEQUEST: unknown setting 'concurency'; did you mean "
                                                   r"'concurrency'\?$"):
        config_from_settings({"concurency": 3})
    with pytest.raises(ImproperlyConfigured, match=r"^SIDEQUEST: concurrency must be a whole number"):
        config_from_settings({"concurrency": 0})


def test_django_refuses_to_start_with_an_unknown_setting(manage):
    bad = manage("stats", extra={"SHOP_SIDEQUEST": json.dumps({"queue": ["orders"]})})
    assert bad.proc.wait(STARTUP) != 0
    assert "SIDEQUEST: unknown setting 'queue'; did you mean 'queues'?" in bad.output()


def test_ready_configures_the_default_client_and_imports_each_apps_jobs_module(shop_db):
    from django.apps import apps

    config = apps.get_app_config("sidequest").config
    assert config.queues == (("orders", 0), ("default", 0)) and config.concurrency == 2
    assert "orders.jobs.send_receipt" in sidequest.default_registry
    assert "sidequest.contrib.django.RunTask" in sidequest.default_registry  # TASKS names our backend


def test_admin_commands_use_the_setting(manage, shop, r):
    from orders.jobs import send_receipt

    send_receipt.perform_async(1)
    stats = manage("stats", "--json")
    assert stats.proc.wait(STARTUP) == 0, stats.output()
    assert json.loads(stats.output())["enqueued"] == 1


# -- enqueue on commit --------------------------------------------------------------------------

def test_a_job_is_pushed_only_when_the_transaction_commits(shop, r):
    from django.db import transaction
    from orders.jobs import send_receipt

    from sidequest.contrib.django import after_commit, enqueue_on_commit

    with transaction.atomic():
        order = new_order()
        enqueue_on_commit(send_receipt, order.pk)
        after_commit(send_receipt.set(queue="default")).perform_in(60, order.pk)
        enqueue_on_commit(send_receipt, order_id=order.pk)
        assert r.llen("queue:orders") == 0 and r.zcard("schedule") == 0
    assert r.llen("queue:orders") == 2 and r.zcard("schedule") == 1
    pushed = [json.loads(raw) for raw in r.lrange("queue:orders", 0, -1)]
    assert [(p["args"], p.get("kwargs")) for p in pushed] == [([], {"order_id": order.pk}), ([order.pk], None)]


def test_a_rolled_back_transaction_pushes_nothing(shop, r):
    from django.db import transaction
    from orders.jobs import send_receipt

    from sidequest.contrib.django import enqueue_on_commit

    class Abandon(Exception):
        pass

    with pytest.raises(Abandon), transaction.atomic():
        enqueue_on_commit(send_receipt, new_order().pk)
        raise Abandon
    response = django_client().post("/orders/abandoned/", {"number": "lost-1", "total": 5})
    assert response.status_code == 409
    assert r.llen("queue:orders") == 0 and r.zcard("schedule") == 0


def test_arguments_are_checked_when_written_not_after_the_commit(shop, r):
    from django.db import transaction
    from orders.jobs import send_receipt

    from sidequest import JobArgumentError
    from sidequest.contrib.django import enqueue_on_commit

    with pytest.raises(JobArgumentError), transaction.atomic():
        enqueue_on_commit(send_receipt, 1, 2)  # type: ignore[call-arg]
    with pytest.raises(JobArgumentError), transaction.atomic():
        enqueue_on_commit(send_receipt, object())  # type: ignore[arg-type]
    with pytest.raises(JobArgumentError, match="unexpected keyword argument 'order'"), transaction.atomic():
        enqueue_on_commit(send_receipt, 1, order=1)  # type: ignore[call-arg]
    assert r.llen("queue:orders") == 0


def test_a_view_saves_a_row_and_the_worker_reads_it(manage, shop, r):
    from orders.models import Order

    running = worker(manage)
    info = running.wait_registered(r)
    assert info["concurrency"] == 2 and info["queues"] == ["orders", "default"]  # from SIDEQUEST
    response = django_client().post("/orders/", {"number": "A-100", "total": 42})
    order_id = response.json()["id"]
    wait_until(lambda: Order.objects.get(pk=order_id).receipt, STARTUP, 0.1, "the receipt")
    assert Order.objects.get(pk=order_id).receipt == "receipt for order A-100: 42"
    assert running.stop() == 0


def test_each_job_starts_without_the_previous_jobs_database_connection(manage, shop, r):
    from orders.jobs import connection_open_at_start

    jids = [connection_open_at_start.perform_async() for _ in range(3)]
    running = worker(manage, "-c", "1")
    assert [sidequest.result(jid, timeout=STARTUP) for jid in jids] == [False, False, False]
    assert running.stop() == 0


def test_processes_children_set_django_up_and_run_the_jobs(manage, shop, r):
    from orders.models import Order

    running = worker(manage, "--processes", "1")
    order = new_order(total=7)
    from orders.jobs import send_receipt

    jid = send_receipt.perform_async(order.pk)
    assert sidequest.result(jid, timeout=STARTUP) == f"receipt for order {order.number}: 7"
    assert Order.objects.get(pk=order.pk).receipt
    assert running.stop() == 0


# -- Django's task framework --------------------------------------------------------------------

def tasks_api():
    """(TaskResultStatus, InvalidTask error, TaskResultDoesNotExist, task_enqueued) wherever they live."""
    from sidequest.contrib.django.compat import TaskResultDoesNotExist, TaskResultStatus, task_enqueued

    try:
        from django.tasks.exceptions import InvalidTask as Invalid
    except ImportError:
        from django_tasks.exceptions import InvalidTaskError as Invalid
    return TaskResultStatus, Invalid, TaskResultDoesNotExist, task_enqueued


def test_enqueue_gives_a_ready_result_that_get_result_reads_back(shop, r):
    from orders.tasks import add

    status, _, _, enqueued = tasks_api()
    seen = []
    enqueued.connect(lambda sender, task_result, **kw: seen.append(task_result.id), weak=False)
    result = add.enqueue(1, b=3)
    assert result.status == status.READY and not result.is_finished and result.attempts == 0
    assert result.started_at is None and result.last_attempted_at is None and result.finished_at is None
    assert result.enqueued_at is not None and result.enqueued_at.tzinfo is not None
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    assert (result.task, result.args, result.kwargs, result.backend) == (add, [1], {"b": 3}, "default")
    assert add.get_result(result.id) == result
    assert seen[-1] == result.id
    payload = json.loads(r.lindex("queue:default", 0))
    assert (payload["class"], payload["wrapped"], payload["args"]) == (
        "sidequest.contrib.django.RunTask", "orders.tasks.add", ["orders.tasks.add", [1], {"b": 3}])
    assert sidequest.status(result.id) == "queued"


def test_aenqueue_and_aget_result(shop, r):
    from orders.tasks import add_later

    status, _, does_not_exist, _ = tasks_api()

    async def both():
        result = await add_later.aenqueue(2, 2)
        return result, await add_later.aget_result(result.id)

    result, again = asyncio.run(both())
    assert result.status == status.READY and again == result
    with pytest.raises(does_not_exist):
        asyncio.run(add_later.aget_result("no-such-id"))


def test_missing_results_and_refused_tasks(shop, r):
    from django.db import transaction
    from orders.tasks import add

    from sidequest.contrib.django.compat import task_backends

    default_task_backend = task_backends["default"]

    _, invalid, does_not_exist, _ = tasks_api()
    for missing in (uuid.uuid4().hex, "123", ""):
        with pytest.raises(does_not_exist):
            default_task_backend.get_result(missing)
    with pytest.raises(invalid, match="priority"):
        add.using(priority=101)  # Django's own range, -100..100
    with pytest.raises(invalid, match="Queue 'elsewhere' is not valid"):
        add.using(queue_name="elsewhere")
    assert list(default_task_backend.check()) == []
    with transaction.atomic():  # as Django's own backends: the enqueue does not wait for the commit
        add.enqueue(1, 1)
        assert r.llen("queue:default") == 1


def test_run_after_schedules_the_task(shop, r):
    from django.utils import timezone
    from orders.tasks import add

    status, _, _, _ = tasks_api()
    later = timezone.now() + timedelta(hours=1)
    result = add.using(run_after=later).enqueue(1, 2)
    assert result.status == status.READY and result.task.run_after == later
    assert sidequest.status(result.id) == "scheduled"
    assert abs(r.zscore("schedule", r.zrange("schedule", 0, 0)[0]) - later.timestamp()) < 0.001
    assert add.get_result(result.id) == result


def test_an_enqueue_no_replica_confirms_raises_not_replicated(shop_db):
    """Issue 28 item 2: with wait_replicas=1 and the replica frozen, `enqueue` and `aenqueue`
    raise NotReplicatedError after about wait_timeout (they sent no WAIT at all); with the
    replica healthy they return, and the replica holds the task's job and record."""
    from django.utils import timezone
    from orders.tasks import add, add_later

    from sidequest.errors import NotReplicatedError

    previous = sidequest.default_client()
    with replicated() as (server, replica):
        try:
            sidequest.configure(Config(redis_url=server.url(), wait_replicas=1, wait_timeout=STARTUP))
            result = add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 2)
            held = redis.Redis.from_url(replica.url())
            assert held.zcard("schedule") == 1 and held.exists(keys.django_task(result.id))
            held.close()
            sidequest.configure(Config(redis_url=server.url(), wait_replicas=1, wait_timeout=REPLICA_WAIT))
            warm_up(lambda: add.enqueue(1, 2))
            with frozen(server, replica):
                began = time.monotonic()
                with pytest.raises(NotReplicatedError, match="0 of the 1 replica"):
                    add.enqueue(3, 4)
                with pytest.raises(NotReplicatedError, match="0 of the 1 replica"):
                    asyncio.run(add_later.aenqueue(5, 6))
                took = time.monotonic() - began
        finally:
            sidequest.configure(client=previous)
    assert 2 * REPLICA_WAIT * 0.8 <= took < 2 * REPLICA_WAIT + 5, f"raised after {took:.2f} s"


def test_tasks_run_on_a_worker_with_results_errors_and_context(manage, shop, r):
    from orders.tasks import add, add_later, attempt_number, order_total, refuse

    from sidequest.contrib.django.compat import SUCCEEDED

    status, _, _, _ = tasks_api()
    order = new_order(total=99)
    results = {"add": add.enqueue(2, 3), "async": add_later.enqueue(4, 5), "refuse": refuse.enqueue("no stock"),
               "context": attempt_number.enqueue(), "row": order_total.enqueue(order.pk)}
    running = worker(manage)
    for result in results.values():
        wait_until(lambda result=result: (result.refresh(), result.is_finished)[1], STARTUP, 0.1, "the task to end")
    assert [results[k].return_value for k in ("add", "async", "context", "row")] == [5, 9, 1, 99]
    done = results["add"]
    assert done.status == SUCCEEDED and done.attempts == 1 and done.errors == []
    assert done.enqueued_at <= done.started_at <= done.finished_at and done.last_attempted_at == done.started_at
    failed = results["refuse"]
    assert failed.status == status.FAILED and failed.attempts == 1
    with pytest.raises(ValueError, match="Task failed"):
        failed.return_value  # noqa: B018
    assert failed.errors[0].exception_class is ValueError
    assert failed.errors[0].traceback.endswith("ValueError: no stock\n")
    assert sidequest.status(failed.id) == "dead" and r.zcard("dead") == 1
    view = django_client().get(f"/orders/{order.pk}/total/").json()
    assert view["status"] == "READY"
    assert sidequest.result(view["result_id"], timeout=STARTUP) == 99
    assert running.stop() == 0


def test_priority_is_sidequests_job_priority_and_the_highest_task_runs_first(manage, shop, r):
    """Issue 31 item 2: Django's priority (-100..100, higher first) becomes sidequest's 0..9
    (5 + priority / 20, rounded); near Django's default, 0, the job is plain: no field, Sidekiq's
    layout. A task of priority 100 pushed after others runs first."""
    from orders.tasks import add

    from sidequest.contrib.django.backend import level

    expected = {0: None, 10: None, -10: None, 11: 6, 20: 6, -20: 4, 50: 7, -60: 2, 100: 9, -100: 0}
    assert {p: level(p) for p in expected} == expected
    plain = add.enqueue(0, 0)
    low = [add.using(priority=-100).enqueue(n, 1) for n in range(3)]
    high = add.using(priority=100).enqueue(9, 0)
    fields = {json.loads(x)["jid"]: json.loads(x).get("priority") for x in r.lrange("queue:default", 0, -1)}
    assert fields == {plain.id: None, low[0].id: 0, low[1].id: 0, low[2].id: 0, high.id: 9}
    assert add.get_result(high.id) == high and high.task.priority == 100

    running = worker(manage, "-c", "1")  # one at a time: the start order is the take order
    for result in [plain, *low, high]:
        wait_until(lambda result=result: (result.refresh(), result.is_finished)[1], STARTUP, 0.1, "the task to end")
    assert high.started_at < plain.started_at < min(result.started_at for result in low)
    assert [result.return_value for result in [plain, *low, high]] == [0, 1, 2, 3, 9]
    assert running.stop() == 0


def test_a_task_payload_naming_a_module_the_worker_did_not_import_never_imports_it(manage, shop, r, tmp_path,
                                                                                   monkeypatch):
    """Issue 28 item 10: a RunTask job imported the module its payload named before any check,
    so any writer of a queue made every Django worker run that module's top-level code. Now only
    a task of a module the worker imported at start runs; the others go to dead saying why."""
    from orders.tasks import add

    from sidequest.store import keys

    marker = tmp_path / "imported"
    (tmp_path / "planted.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n\ndef run():\n    return 1\n")
    planted = ["planted.run", "planted.run", "os.system"]
    for n, path in enumerate(planted):  # by hand, as another project or a Ruby producer on the Redis could
        r.lpush("queue:default", json.dumps({
            "class": "sidequest.contrib.django.RunTask", "args": [path, [], {}], "wrapped": path, "retry": 0,
            "queue": "default", "jid": f"{n:024x}", "created_at": 1.0, "enqueued_at": 1.0}))
    # the second also has a task record of its own naming the module (what `get_result` reads too)
    r.hset(keys.django_task(f"{1:024x}"), mapping={"task": "planted.run", "backend": "default",
                                                    "queue_name": "default"})
    good = add.enqueue(2, 3)
    path = os.pathsep.join([str(tmp_path), python_env()["PYTHONPATH"]])  # `planted` is importable there
    running = worker(manage, extra={"PYTHONPATH": path})
    wait_until(lambda: r.zcard("dead") == len(planted), STARTUP, 0.1, "the planted tasks to go to dead")
    assert sidequest.result(good.id, timeout=STARTUP) == 5  # a task of an app's tasks.py runs
    assert not marker.exists(), "the worker imported a module a payload named"
    errors = sorted(json.loads(raw)["error_message"] for raw in r.zrange("dead", 0, -1))
    assert all("is not a task this worker imported" in error for error in errors), errors
    assert running.stop() == 0
    from sidequest.contrib.django.compat import task_backends

    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(tasks_api()[2]):  # nor does a web process import it to read a result
        task_backends["default"].get_result(f"{1:024x}")
    assert not marker.exists() and "planted" not in sys.modules


# -- the dashboard ------------------------------------------------------------------------------

def django_client():
    from django.test import Client

    return Client()


def user(name: str, *, staff: bool, manage: bool = False, superuser: bool = False):
    """A user; `manage`: with the permission to act in the dashboard (`sidequest.manage_jobs`)."""
    from django.contrib.auth.models import Permission, User

    made = User.objects.create_user(f"{name}-{uuid.uuid4().hex[:8]}", password="x", is_staff=staff,
                                    is_superuser=superuser)
    if manage:
        made.user_permissions.add(Permission.objects.get(content_type__app_label="sidequest", codename="manage_jobs"))
    return made


def test_the_dashboard_is_for_staff_only(shop, r):
    from django.conf import settings

    anonymous = django_client().get("/sidequest/")
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith(f"{settings.LOGIN_URL}?next=/sidequest/")
    visitor = django_client()
    visitor.force_login(user("visitor", staff=False))
    assert visitor.get("/sidequest/").status_code == 403
    assert visitor.get("/sidequest/queues").status_code == 403


def test_staff_see_the_dashboard_and_act_through_its_csrf_check(shop, r):
    from orders.jobs import send_receipt

    send_receipt.perform_async(1)
    staff = django_client()
    staff.force_login(user("staff", staff=True, manage=True))
    page = staff.get("/sidequest/queues")
    assert page.status_code == 200 and b"orders" in page.content
    assert b'href="/sidequest/queues/orders"' in page.content  # links under the mount point
    assert staff.get("/sidequest/static/" + static_asset()).status_code == 200
    token = staff.cookies["sidequest_csrf"].value
    form = "application/x-www-form-urlencoded"  # as the dashboard's forms post
    refused = staff.post("/sidequest/queues/actions", urlencode({"name": "orders", "do": "pause"}), form)
    assert refused.status_code == 403 and not r.sismember("sidequest:paused", "orders")
    done = staff.post("/sidequest/queues/actions", urlencode({"name": "orders", "do": "pause", "csrf": token}), form)
    assert done.status_code in (302, 303) and done["Location"].startswith("/sidequest/queues")
    assert r.sismember("sidequest:paused", "orders")


def test_acting_in_the_dashboard_needs_its_own_permission(shop, r):
    """Issue 28 item 11: any active staff user had full write access to the dashboard mounted
    in Django. Staff see it read-only; acting needs `sidequest.manage_jobs` (superusers have it)."""
    form = "application/x-www-form-urlencoded"

    def pause(who) -> int:
        browser = django_client()
        browser.force_login(who)
        page = browser.get("/sidequest/queues")
        assert page.status_code == 200
        token = browser.cookies["sidequest_csrf"].value
        done = browser.post("/sidequest/queues/actions", urlencode({"name": "orders", "do": "pause", "csrf": token}),
                            form)
        return done.status_code

    assert pause(user("staff", staff=True)) == 403
    assert not r.sismember("sidequest:paused", "orders")
    staff = django_client()
    staff.force_login(user("staff", staff=True))
    assert "Read-only" in staff.get("/sidequest/queues").content.decode()
    assert pause(user("manager", staff=True, manage=True)) in (302, 303)
    assert r.sismember("sidequest:paused", "orders")
    r.srem("sidequest:paused", "orders")
    assert pause(user("root", staff=True, superuser=True)) in (302, 303)
    assert r.sismember("sidequest:paused", "orders")


def test_the_dashboard_answers_under_asgi_too(shop, r):
    from django.test import AsyncClient

    async def visit():
        client = AsyncClient()
        await client.aforce_login(await sync_to_async(user)("staff", staff=True))
        return await client.get("/sidequest/")

    page = asyncio.run(visit())
    assert page.status_code == 200 and b"/sidequest/queues" in page.content


def static_asset() -> str:
    folder = ROOT / "src" / "sidequest" / "web" / "static"
    return sorted(p.name for p in folder.iterdir() if p.suffix == ".css")[0]


# -- types ---------------------------------------------------------------------------------------

def test_mypy_checks_deferred_pushes_against_the_jobs_parameters(tmp_path):
    source = tmp_path / "user_code.py"
    source.write_text(textwrap.dedent("""
        import sidequest
        from sidequest.contrib.django import after_commit, enqueue_on_commit

        @sidequest.job
        def send(user_id: int) -> None: ...

        class Resize(sidequest.Job):
            def perform(self, path: str, width: int) -> None: ...

        enqueue_on_commit(send, 1)
        enqueue_on_commit(Resize, "a.png", 3)
        after_commit(send.set(queue="mail"), using="other").perform_in(60, 1)
        enqueue_on_commit(send, "1")  # error
        enqueue_on_commit(Resize, "a.png")  # error
        after_commit(send).perform_async(1, 2)  # error
    """))
    run = subprocess.run([PYTHON, "-m", "mypy", "--strict", "--no-incremental", str(source)],
                         capture_output=True, text=True, cwd=ROOT, timeout=STARTUP * 3)
    flagged = {int(n) for n in re.findall(r"user_code\.py:(\d+): error", run.stdout)}
    expected = {n for n, line in enumerate(source.read_text().splitlines(), 1) if line.endswith("# error")}
    assert flagged == expected, run.stdout


# -- docs ---------------------------------------------------------------------------------------

def test_the_docs_quote_the_example_project_as_it_is():
    """Every block of docs/integrations-django.md that names a file of the example shop is that file."""
    text = (ROOT / "docs" / "integrations-django.md").read_text()
    blocks = re.findall(r"```python\n# (tests/django_project/\S+)[^\n]*\n(.*?)```", text, re.S)
    assert len(blocks) >= 5
    for path, body in blocks:
        source = (ROOT / path).read_text()
        assert body.strip() in source, f"the docs' {path} differs from the file"


def test_the_worker_logs_each_task_line_once(manage, shop, r):
    """Issue 28 item 15: the Django worker logged each `django.tasks` line twice: Django's default
    logging gives the `django` logger a console handler (DEBUG on, as in a new project), and the
    line also propagates to the root logger, where the worker writes every line."""
    from orders.tasks import add

    result = add.enqueue(20, 22)
    running = worker(manage, "-r", "django_log_probe", extra={"SHOP_DEBUG": "1"})
    sidequest.default_client().push("DjangoTasksLine", ["a line of django.tasks"])
    wait_until(lambda: (result.refresh(), result.is_finished)[1], STARTUP, 0.1, "the task to end")
    wait_until(lambda: re.search(r"class=DjangoTasksLine .*INFO: done", running.output()), STARTUP, 0.1,
               "the probe job to end")
    assert running.stop() == 0
    out = running.output()
    assert out.count("a line of django.tasks") == 1, out
    lines = [line for line in out.splitlines() if f"Task id={result.id}" in line]
    assert [line.rsplit("state=", 1)[1] for line in lines] == ["RUNNING", "SUCCESSFUL"], out  # the backport's names
