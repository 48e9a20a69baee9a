"""Defining jobs: arguments checked against the job's signature at push, and names that a
worker can resolve (no `__main__.` default names)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

import sidequest
from sidequest import Client, JobArgumentError, JobDefinitionError, Registry

REGISTRY = Registry()


@sidequest.job(name="Def.send", registry=REGISTRY)
def send(user_id: int) -> None:
    pass


@sidequest.job(name="Def.fetch", registry=REGISTRY)
async def fetch(url: str, retries: int = 3) -> None:
    pass


@sidequest.job(name="Def.anything", registry=REGISTRY)
def anything(first, *rest):
    pass


class Resize(sidequest.Job, name="Def.Resize", registry=REGISTRY):
    def perform(self, path: str, width: int) -> None:
        pass


class Ping(sidequest.Job, name="Def.Ping", registry=REGISTRY):
    @staticmethod
    def perform() -> None:
        pass


def nothing_written(r) -> bool:
    return r.dbsize() == 0


# -- arguments against the signature -------------------------------------------------------------

@pytest.mark.parametrize(("call", "expected"), [
    (lambda c: send.set(client=c).perform_async(1, 2, 3),
     "job Def.send takes (user_id: int), got 3 arguments [1, 2, 3]: too many positional arguments"),
    (lambda c: send.set(client=c).perform_async(),
     "job Def.send takes (user_id: int), got 0 arguments []: missing a required argument: 'user_id'"),
    (lambda c: send.set(client=c).perform_in(60, 1, 2), "got 2 arguments [1, 2]"),
    (lambda c: send.set(client=c).perform_at(datetime.now(UTC), 1, 2), "got 2 arguments [1, 2]"),
    (lambda c: c.push(send, [1, 2]), "job Def.send takes (user_id: int), got 2 arguments"),
    (lambda c: fetch.set(client=c).perform_async("u", 1, 2),
     "job Def.fetch takes (url: str, retries: int = 3), got 3 arguments"),
    (lambda c: Resize.set(client=c).perform_async("a.png"),
     "job Def.Resize takes (path: str, width: int), got 1 argument ['a.png']: missing a required argument: 'width'"),
    (lambda c: Resize.set(client=c, queue="urgent").perform_in(5, "a.png", 1, 2), "too many positional arguments"),
    (lambda c: c.push(Resize, ["a.png", 1, 2]), "job Def.Resize takes (path: str, width: int)"),
    (lambda c: c.push(Ping, [1]), "job Def.Ping takes (), got 1 argument [1]"),
    (lambda c: anything.set(client=c).perform_async(), "missing a required argument: 'first'"),
])
def test_arguments_that_do_not_fit_the_signature_are_refused_and_nothing_is_written(client, r, call, expected):
    with pytest.raises(JobArgumentError) as caught:
        call(client)
    assert expected in str(caught.value)
    assert nothing_written(r)


def test_arguments_that_fit_are_pushed(client, r):
    assert send.set(client=client).perform_async(1)
    assert fetch.set(client=client).perform_async("u")
    assert fetch.set(client=client).perform_async("u", 5)
    assert anything.set(client=client).perform_async(1, 2, 3, 4)
    assert Resize.set(client=client).perform_in(60, "a.png", 100)
    assert Ping.set(client=client).perform_async()
    assert r.llen("queue:default") == 5 and r.zcard("schedule") == 1


@sidequest.job(name="Def.mail", registry=REGISTRY)
def mail(user_id: int, *, template: str = "welcome", locale: str | None = None) -> None:
    pass


@pytest.mark.parametrize("call", [
    lambda c: send.set(client=c).perform_async(user_id=1),
    lambda c: send.set(client=c).perform_in(60, user_id=1),
    lambda c: mail.set(client=c).perform_async(7, template="reset"),
    lambda c: mail.set(client=c).perform_at(time.time() + 60, 7, locale="fr", template="reset"),
    lambda c: Resize.set(client=c).perform_at(time.time() + 60, "a.png", width=1),
    lambda c: c.push(mail, [7], {"template": "reset"}),
    lambda c: mail.set(client=c).delay(7, template="reset"),
])
def test_keyword_arguments_are_pushed_as_the_payloads_kwargs(client, r, call):
    jid = call(client)
    raw = r.lrange("queue:default", 0, -1) or r.zrange("schedule", 0, -1)
    [payload] = [json.loads(x) for x in raw]
    assert payload["jid"] == jid and payload["args"] + list(payload["kwargs"].values()) != []
    assert list(payload).index("kwargs") == list(payload).index("args") + 1  # after args, as a reader expects
    assert all(isinstance(value, (int, str)) for value in payload["kwargs"].values())


def test_a_push_without_keywords_has_no_kwargs_key(client, r):
    mail.set(client=client).perform_async(7)
    client.push(mail, [7], {})
    assert [json.loads(x).get("kwargs", "none") for x in r.lrange("queue:default", 0, -1)] == ["none", "none"]


@pytest.mark.parametrize(("call", "expected"), [
    (lambda c: mail.set(client=c).perform_async(7, templat="reset"),
     "job Def.mail takes (user_id: int, *, template: str = 'welcome', locale: str | None = None), "
     "got 1 argument [7] and keywords (templat=): got an unexpected keyword argument 'templat'"),
    (lambda c: send.set(client=c).perform_async(1, user_id=1), "multiple values for argument 'user_id'"),
    (lambda c: Resize.set(client=c).perform_async("a.png", width=1, height=2), "unexpected keyword argument 'height'"),
    (lambda c: c.push(mail, [], {"template": "x"}), "missing a required argument: 'user_id'"),
    (lambda c: mail.set(client=c).perform_async(7, template=datetime.now(UTC)),
     "keyword argument 'template' (datetime) is not native JSON: kwargs['template'] is a datetime"),
    (lambda c: mail.set(client=c).perform_async(7, template=(1, 2)), "kwargs['template'] is a tuple"),
    (lambda c: c.push(mail, [7], {1: "x"}), "keyword argument names must be strings, got 1 (int)"),
    (lambda c: c.push(mail, [7], ["template", "x"]), "kwargs must be a dict of keyword arguments, got list"),
])
def test_keyword_arguments_that_do_not_fit_are_refused_and_nothing_is_written(client, r, call, expected):
    with pytest.raises(JobArgumentError) as caught:
        call(client)
    assert expected in str(caught.value)
    assert nothing_written(r)


def test_a_required_keyword_only_parameter_is_given_by_keyword(client, r):
    @sidequest.job(name="Def.keyed", registry=REGISTRY)
    def keyed(*, token: str) -> None:
        pass

    assert keyed.set(client=client).perform_async(token="t")
    # Python 3.12 says "keyword-only argument"; 3.11 says "argument".
    with pytest.raises(JobArgumentError, match=r"missing a required (keyword-only )?argument: 'token'"):
        keyed.set(client=client).perform_async()


@pytest.mark.parametrize("push", [
    lambda: sidequest.push("RubyMailer", [7], kwargs={"template": "reset"}),
    lambda: Client().push("RubyMailer", [7], {"template": "reset"}),
])
def test_keywords_to_a_job_of_another_codebase_are_refused_in_one_line(push, r):
    with pytest.raises(JobArgumentError) as caught:
        push()
    message = str(caught.value)
    assert message.startswith("job RubyMailer: keyword arguments (template=) cannot go to a job that is not a "
                              "Python job of this codebase"), message
    assert "\n" not in message and "in args" in message
    assert nothing_written(r)


def test_keywords_to_a_registered_python_job_by_name_are_bound_to_its_signature(config, r):
    client = Client(config)
    sidequest.default_registry.register(mail.job_class)
    try:
        assert client.push("Def.mail", [7], {"template": "reset"})
        with pytest.raises(JobArgumentError, match="unexpected keyword argument 'nope'"):
            client.push("Def.mail", [7], {"nope": 1})
    finally:
        sidequest.default_registry.unregister("Def.mail")
    assert r.llen("queue:default") == 1


def test_a_bulk_with_one_bad_row_names_it_and_writes_nothing(client, r):
    with pytest.raises(JobArgumentError, match=r"^job 2 of the bulk: job Def.send takes \(user_id: int\), got 2"):
        send.set(client=client).perform_bulk([[1], [2], [3, 4], [5]])
    with pytest.raises(JobArgumentError, match=r"^job 1 of the bulk: job Def.Resize .* got 1 argument"):
        Resize.set(client=client).perform_bulk([["a.png", 1], ["b.png"]], at=time.time() + 60)
    assert nothing_written(r)


def test_a_push_by_name_is_not_checked(client, r):
    """A job of another codebase: its parameters are unknown here."""
    assert client.push("Def.send", [1, 2, 3])
    assert r.llen("queue:default") == 1


def test_the_signature_is_read_once_per_job_class(client, monkeypatch):
    import inspect

    def boom(*args, **kwargs):
        raise AssertionError("inspect.signature called at push")

    monkeypatch.setattr(inspect, "signature", boom)
    with pytest.raises(JobArgumentError):
        Resize.set(client=client).perform_async("a.png", 1, 2)
    with pytest.raises(JobArgumentError):
        send.set(client=client).perform_async()


def test_the_function_stays_callable_with_keywords():
    """Calling the function here and now is plain Python."""
    assert send(user_id=1) is None


# -- names a worker can resolve --------------------------------------------------------------------

def run_as_main(code: str) -> dict:
    """Execute `code` as a script run directly would be (its module is `__main__`)."""
    namespace = {"__name__": "__main__", "sidequest": sidequest, "Registry": Registry}
    exec(compile(code, "<script>", "exec"), namespace)
    return namespace


def test_a_decorated_function_in_main_needs_a_name():
    with pytest.raises(JobDefinitionError) as caught:
        run_as_main("@sidequest.job(registry=Registry())\ndef hello(who):\n    pass\n")
    message = str(caught.value)
    assert "job hello is defined in __main__" in message
    assert "'__main__.hello'" in message and 'give it name="hello"' in message


def test_a_job_class_in_main_needs_a_name():
    code = "class Hello(sidequest.Job, registry=Registry()):\n    def perform(self):\n        pass\n"
    with pytest.raises(JobDefinitionError, match=r'job Hello is defined in __main__.*name="Hello"'):
        run_as_main(code)


def test_in_main_a_name_or_abstract_is_enough():
    namespace = run_as_main(
        "registry = Registry()\n"
        "@sidequest.job(name='hello', registry=registry)\n"
        "def hello(who):\n    pass\n"
        "class Base(sidequest.Job, abstract=True, queue='mail'):\n    pass\n"
        "class Hello(Base, name='Hello', registry=registry):\n    def perform(self):\n        pass\n")
    assert namespace["registry"].names() == ["Hello", "hello"]
    assert namespace["Hello"].payload_options()["queue"] == "mail"


def test_a_script_that_defines_and_pushes_a_job_without_a_name_fails_at_definition(tmp_path, redis_url):
    import subprocess
    import sys

    from conftest import STARTUP, python_env

    script = tmp_path / "enqueue.py"
    script.write_text("import sidequest\n\n@sidequest.job\ndef hello():\n    pass\n\nhello.perform_async()\n")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=2 * STARTUP,
                            env=python_env(REDIS_URL=redis_url))
    assert result.returncode == 1
    assert "sidequest.errors.JobDefinitionError: job hello is defined in __main__" in result.stderr
    assert Client(sidequest.Config(redis_url=redis_url)).redis.dbsize() == 0


# -- option names ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("options", "suggestion"), [
    ({"retries": 3}, "did you mean 'retry'?"),          # Celery's and Huey's spelling
    ({"max_retries": 3}, "did you mean 'retry'?"),      # Celery's and Dramatiq's
    ({"queue_name": "mail"}, "did you mean 'queue'?"),  # Dramatiq's
    ({"quee": "mail"}, "did you mean 'queue'?"),
    ({"timout": 5}, "did you mean 'timeout'?"),
    ({"result_tll": 60}, "did you mean 'result_ttl'?"),
    ({"countdown": 60}, "push it with perform_in(seconds, ...)"),
    ({"colour": "red"}, "the options are queue, retry,"),
    # Celery's task options, as a port writes them first: each says where the thing lives here
    ({"bind": True}, "sidequest.current_job()"),
    ({"autoretry_for": (OSError,)}, "did you mean 'retry_on'?"),
    ({"default_retry_delay": 5}, "retry_in=lambda count, exc: seconds"),
    ({"retry_backoff": True}, "retry_in=lambda count, exc: seconds"),
    ({"rate_limit": "10/m"}, "sidequest.limiter"),
    ({"ignore_result": True}, "no result is kept unless"),
    ({"acks_late": True}, "reliable fetch"),
    ({"priority": 10}, "an int from 0 to 9"),
])
def test_a_misspelt_option_is_refused_where_the_job_is_defined(options, suggestion):
    name = next(iter(options))
    with pytest.raises(JobDefinitionError) as by_decorator:
        sidequest.job(name="Def.typo", registry=Registry(), **options)(lambda: None)
    with pytest.raises(JobDefinitionError) as by_class:
        type("Typo", (sidequest.Job,), {"perform": lambda self: None}, name="Def.Typo", registry=Registry(),
             **options)
    for caught in (by_decorator, by_class):
        message = str(caught.value)
        assert "\n" not in message and suggestion in message and repr(name) in message
    if suggestion.startswith(("did you mean", "the options")):
        assert f"custom={{{name!r}: ...}}" in str(by_decorator.value)


def test_a_misspelt_option_is_refused_by_set_and_push_and_nothing_is_written(client, r):
    for call in (lambda: send.set(retries=3), lambda: Resize.set(client=client).set(quee="x"),
                 lambda: send.aio.set(timout=5), lambda: client.push(send, [1], result_tll=60),
                 lambda: client.push("HardWorker", [1], max_retries=2),
                 lambda: Resize.set(client=client, custom={"retry": 3})):
        with pytest.raises(JobArgumentError, match=r"did you mean '(retry|queue|timeout|result_ttl)'|as retry="):
            call()
    assert nothing_written(r)


def test_custom_fields_travel_as_top_level_payload_fields(client, r):
    tenant = sidequest.job(name="Def.tenant", registry=Registry(), custom={"tenant": "acme", "region": "eu"})(
        lambda user_id: None)
    tenant.set(client=client, custom={"trace": "t-1", "region": "us"}).set(queue="mail").perform_async(7)
    client.push("HardWorker", [1], custom={"lock": "until_executed"})
    [pushed] = [json.loads(raw) for raw in r.lrange("queue:mail", 0, -1)]
    assert pushed["tenant"] == "acme" and pushed["region"] == "us" and pushed["trace"] == "t-1"
    assert "custom" not in pushed and pushed["queue"] == "mail"
    [by_name] = [json.loads(raw) for raw in r.lrange("queue:default", 0, -1)]
    assert by_name["lock"] == "until_executed" and "custom" not in by_name


@pytest.mark.parametrize(("custom", "expected"), [
    ({"queue": "x"}, "'queue' is a job option, not a custom field: give it as queue=..."),
    ({"jid": "x"}, "'jid' is set by sidequest itself"),
    ({"when": {1, 2}}, "custom field 'when' is not native JSON"),
    (["tenant"], "option 'custom' must be a dict"),
])
def test_bad_custom_fields_are_refused(custom, expected):
    with pytest.raises(JobArgumentError) as caught:
        send.set(custom=custom)
    assert expected in str(caught.value)


@pytest.mark.parametrize("field", ["workflow_id", "workflow_step", "task_id"])
def test_fields_that_steer_a_feature_cannot_be_set_by_a_push(client, r, field):
    """Issue 28 item 11: `custom={"workflow_id": ...}` (or `task_id`) made any push claim to be
    another workflow's step or task's job; these fields are set by workflows and tasks only."""
    calls = (lambda: send.set(custom={field: "x"}), lambda: client.push(send, [1], custom={field: "x"}),
             lambda: client.push("HardWorker", [1], custom={field: "x"}),
             lambda: sidequest.job(name="Def.steer", registry=Registry(), custom={field: "x"})(lambda: None))
    refused = f"'{field}' is set by sidequest's (workflows|tasks)"
    for call in calls:
        with pytest.raises((JobArgumentError, JobDefinitionError), match=refused):
            call()
    assert nothing_written(r)


# -- Celery's shortcuts: delay and apply_async -----------------------------------------------------

def pushed(r) -> list[tuple[dict, float | None]]:
    """Every job written: (payload, its schedule time or None when enqueued now)."""
    found = [(json.loads(raw), None) for queue in r.smembers("queues") for raw in r.lrange(b"queue:" + queue, 0, -1)]
    return found + [(json.loads(raw), score) for raw, score in r.zrange("schedule", 0, -1, withscores=True)]


def test_delay_is_perform_async_on_functions_classes_and_setters(config, r):
    sidequest.configure(config)
    jids = [mail.delay(7, template="reset"), Resize.delay("a.png", 100), mail.set(queue="urgent").delay(8),
            Resize.set(queue="urgent").delay("b.png", width=5)]
    found = {p["jid"]: (p["class"], p["queue"], p["args"], p.get("kwargs")) for p, _ in pushed(r)}
    assert [found[jid] for jid in jids] == [
        ("Def.mail", "default", [7], {"template": "reset"}), ("Def.Resize", "default", ["a.png", 100], None),
        ("Def.mail", "urgent", [8], None), ("Def.Resize", "urgent", ["b.png"], {"width": 5})]


def test_apply_async_maps_celerys_options_to_sidequests(client, r):
    now = time.time()
    eta = datetime.fromtimestamp(now + 3600, UTC)
    jids = [
        mail.set(client=client).apply_async((7,), {"template": "reset"}),
        mail.set(client=client).apply_async([8], countdown=60, queue="urgent"),
        mail.set(client=client).apply_async(args=[9], eta=eta, expires=7200),
        mail.set(client=client).apply_async([10], expires=datetime.fromtimestamp(now + 600, UTC)),
        mail.set(client=client).apply_async([11], countdown=30, expires=timedelta(minutes=2)),
        Resize.set(client=client).apply_async(["a.png"], {"width": 3}),
    ]
    found = {p["jid"]: (p, at) for p, at in pushed(r)}
    (first, at1), (second, at2), (third, at3), (fourth, at4), (fifth, at5), (sixth, at6) = (found[j] for j in jids)
    assert at6 is None
    assert (first["args"], first["kwargs"], at1) == ([7], {"template": "reset"}, None)
    assert second["queue"] == "urgent" and at2 == pytest.approx(now + 60, abs=5)
    assert at3 == pytest.approx(eta.timestamp(), abs=0.01)
    # Celery's expires counts from the call (a number, a timedelta) or is a time (a datetime);
    # sidequest's expires_in counts from the job's own time: the deadline is the same
    assert third["expires_at"] == pytest.approx(now + 7200, abs=5) and third["expires_in"] == pytest.approx(3600, abs=5)
    assert at4 is None and fourth["expires_at"] == pytest.approx(now + 600, abs=5)
    assert at5 == pytest.approx(now + 30, abs=5) and fifth["expires_at"] == pytest.approx(now + 120, abs=5)
    assert (sixth["class"], sixth["args"], sixth["kwargs"]) == ("Def.Resize", ["a.png"], {"width": 3})


def test_apply_async_on_functions_and_classes_uses_the_default_client(config, r):
    sidequest.configure(config)
    jid = mail.apply_async([7], {"locale": "fr"}, queue="mail")
    other = Resize.apply_async(("a.png", 1))
    found = {p["jid"]: p for p, _ in pushed(r)}
    assert (found[jid]["queue"], found[jid]["kwargs"]) == ("mail", {"locale": "fr"})
    assert found[other]["args"] == ["a.png", 1]


@pytest.mark.parametrize(("call", "expected"), [
    (lambda c: mail.set(client=c).apply_async([1], countdown=5, eta=datetime.now(UTC)),
     "apply_async takes countdown or eta, not both"),
    (lambda c: mail.set(client=c).apply_async([1], expires=-5), "apply_async: expires"),
    (lambda c: mail.set(client=c).apply_async([1], eta=datetime.now(UTC) + timedelta(hours=1), expires=60),
     "apply_async: expires"),
    (lambda c: mail.set(client=c).apply_async([1], {"nope": 2}), "unexpected keyword argument 'nope'"),
    (lambda c: mail.set(client=c).apply_async("ab"), "apply_async takes args as a list or tuple, got str"),
])
def test_apply_async_refuses_what_it_cannot_map(client, r, call, expected):
    with pytest.raises(JobArgumentError) as caught:
        call(client)
    assert expected in str(caught.value)
    assert nothing_written(r)
