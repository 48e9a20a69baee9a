"""The Lua each core script runs, with the registered features: `store/scripts.py` shows the core's
part only, the rest is assembled when a worker (or an operator's client) starts.

    pytest tests/store/test_scripts_text.py -s      # prints every script, as Redis gets it

and writes each to tests/artifacts/scripts/<NAME>.lua (not in git), headed by the features it
runs, in order, and which of them has an operation at each of its points.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from sidequest.api.actions import Actions
from sidequest.store import scripts
from sidequest.worker import lifecycle
from sidequest.worker.launcher import Launcher
from sidequest.worker.outcome import Outcome

ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts" / "scripts"

# The features in a worker's scripts, in the order their operations run: as before the registry
# (the workflow's operation reads the result the status operation wrote in the same call).
WORKER_ORDER = ["task", "job_metrics", "cancel", "unique", "lanes", "flow", "status", "steps", "workflow"]
OPERATOR_ORDER = ["task", "unique", "lanes", "flow", "status", "steps", "workflow"]  # no run to count, no flag to read

# The points each script applies (docs/architecture.md, "The lifecycle seam").
POINTS = {
    "SETTLE": ("taken", "finished", "retried", "dead", "dropped", "snoozed", "cancelled", "put_back"),
    "RESERVE": ("finished",),
    "RECOVER": ("recovered",),
    "ADMIN_REQUEUE": ("requeued",),
    "ADMIN_KILL": ("killed",),
    "ADMIN_DELETE": ("deleted", "cancelled"),
}
# A job that uses every feature (each feature's `marks`), to show who has an operation where.
EVERY_FEATURE = {"class": "Report", "jid": "b1c2d3", "queue": "default", "task_id": "t1",
                 "unique_digest": "sidequest:unique:d1", "result_ttl": 60, "workflow_id": "w1",
                 "workflow_step": "s1", "group": "g1", "debounce": 5, "flow_key": "d2"}
_LATER, _BOOM = time.time() + 30, RuntimeError("boom")
OUTCOMES = {"finished": Outcome.done(0.01), "retried": Outcome("retry", at=_LATER, error=_BOOM),
            "dead": Outcome("dead", at=time.time(), error=_BOOM, exhausted=True), "dropped": Outcome("dropped"),
            "snoozed": Outcome("snoozed", at=_LATER), "put_back": Outcome.put_back(),
            "cancelled": Outcome("cancelled")}


@pytest.fixture
def rendered(config, client):
    """{script name: (its Lua as registered, the lifecycle it runs)}, from a worker and an operator's client."""
    launcher = Launcher(config)
    try:
        worker, admin = launcher.recovery.lifecycle, Actions(client)
        found = {
            "SETTLE": (launcher.scripts.settle.script, worker),
            "RESERVE": (launcher.scripts.reserve.script, worker),
            "RECOVER": (launcher.scripts.recover.script, worker),
            "ENQUEUE_DUE": (launcher.scripts.enqueue_due.script, None),
            "RELEASE_LOCK": (launcher.scripts.release_lock.script, None),
            "FORGET_RESERVED": (launcher.scripts.forget_reserved.script, None),
            "ADMIN_REQUEUE": (admin._requeue.script, admin.lifecycle),
            "ADMIN_KILL": (admin._kill.script, admin.lifecycle),
            "ADMIN_DELETE": (admin._delete.script, admin.lifecycle),
            "ADMIN_FORGET_QUEUE": (admin._forget.script, None),
        }
    finally:
        launcher.executor.close()
        launcher.redis.close()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for name, (text, lifecycle_) in found.items():
        lua = _header(name, lifecycle_) + text
        (ARTIFACTS / f"{name}.lua").write_text(lua, encoding="utf-8")
    return found


def _header(name: str, lifecycle_: lifecycle.Lifecycle | None) -> str:
    if lifecycle_ is None:
        return f"-- {name}: the core's move only (no lifecycle point)\n"
    lines = [f"-- {name}, with the registered features (their operations run in this order, each under pcall,",
             "-- after the core's move and only if it happened): "
             + ", ".join(f.name for f in lifecycle_.features)]
    for point in POINTS[name]:
        called = [f.name for f in lifecycle_.features if f.ops(point, EVERY_FEATURE, OUTCOMES.get(point)) is not None]
        lines.append(f"--   at {point!r}, for a job that uses every feature: {', '.join(called) or 'none'}")
    return "\n".join(lines) + "\n"


def test_every_core_script_is_rendered(rendered):
    core = {name for name in dir(scripts)  # the scripts: their Lua, not a number they use (PUT_BACK_DEPTH)
            if name.isupper() and not name.startswith("_") and isinstance(getattr(scripts, name), str)}
    assert set(rendered) == core
    for name in rendered:  # in the order a job meets them
        lua = (ARTIFACTS / f"{name}.lua").read_text(encoding="utf-8")
        assert lua.endswith(getattr(scripts, name))
        print(f"\n===== {name} ({ARTIFACTS / name}.lua) =====\n{lua}")


def test_the_worker_and_an_operator_run_the_one_registered_list_in_its_order(rendered):
    names = [p.name for p in lifecycle.registered() if p.feature is not None]
    assert names == WORKER_ORDER
    assert [p.name for p in lifecycle.registered() if p.operator] == OPERATOR_ORDER
    assert [f.name for f in rendered["SETTLE"][1].features] == WORKER_ORDER
    assert [f.name for f in rendered["ADMIN_DELETE"][1].features] == OPERATOR_ORDER


@pytest.mark.parametrize("name", list(POINTS))
def test_each_feature_is_defined_in_order_and_called_only_under_pcall(rendered, name):
    text, lifecycle_ = rendered[name]
    defined = re.findall(r"FEATURES\['(\w+)'\] = function", text)
    assert defined == [f.name for f in lifecycle_.features if f.lua]  # registration order, each once
    assert defined  # tasks, unique claims, status records, workflows
    # the only call of a feature's function: run_ops's, under pcall, its error kept as a fault
    calls = [m.group(0) for m in re.finditer(r"[^\n]*FEATURES\[(?!'\w+'\] = function)[^\n]*", text)]
    assert [c.strip() for c in calls] == ["local ok, err = pcall(FEATURES[name], point, now, a)"]
    assert "if not ok then fault(" in text


@pytest.mark.parametrize("name", list(POINTS))
def test_the_features_run_after_the_core_move_and_only_if_it_happened(rendered, name):
    body = getattr(scripts, name)  # what follows the shared functions
    assert rendered[name][0].endswith(body)
    if name == "RESERVE":  # each success's operations, only if it was still in the batch list
        assert re.search(r"if removed\[a\] then run_ops\(ARGV, at\[a\], 'finished'", body)
        return
    before, ops, after = body.partition("run_ops(ARGV")
    assert ops and re.search(r"then\s+return (0|settled)\s+end\s", before)  # no move, no operation
    assert after.rstrip().endswith("return answer(1)")  # the faults beside the reply (see `faults`)


def _called(ops: list) -> list[str]:
    """The features an operations list (`Lifecycle.ops`: n, (name, k, args...)*) calls, in order."""
    names, i = [], 1
    for _ in range(ops[0]):
        names.append(ops[i])
        i += 2 + ops[i + 1]
    return names


def test_settle_calls_every_registered_feature_that_has_lua_in_order(rendered):
    _, lifecycle_ = rendered["SETTLE"]
    with_lua = [f.name for f in lifecycle_.features if f.lua]
    seen: set[str] = set()
    for point in POINTS["SETTLE"]:
        called = _called(lifecycle_.ops(point, EVERY_FEATURE, OUTCOMES.get(point)))
        assert called == [name for name in with_lua if name in called]  # the registered order
        seen.update(called)
    assert seen == set(with_lua)


class _Marker:
    """A feature registered by a test: its Lua and its thread must reach a worker through the seam."""

    name, marks, observes, wraps = "marker", frozenset({"marker"}), False, False
    lua = "FEATURES['marker'] = function(point, now, a) redis.call('set', a[1], point) end"

    def ops(self, point, payload, outcome):
        return ["sidequest:marker"] if payload.get("marker") else None

    def running(self, payload):
        return None

    def observe(self, point, payload, outcome):
        pass

    def start(self):  # a thread of the feature's, which the launcher starts with the poller
        pass

    def stop(self):
        pass


def test_a_registered_feature_reaches_the_worker_and_the_operator_without_naming(config, client, monkeypatch):
    monkeypatch.setattr(lifecycle, "_plugins", dict(lifecycle._plugins))  # the registry as it was, after
    marker = _Marker()
    lifecycle.register(lifecycle.Plugin("marker", feature=lambda s: marker, operator=True,
                                        service=lambda s: marker))
    launcher = Launcher(config)
    try:
        assert launcher.scripts.settle.script.rstrip().endswith(scripts.SETTLE.rstrip())
        assert marker.lua in launcher.scripts.settle.script and marker.lua in Actions(client)._delete.script
        assert [f.name for f in launcher.recovery.lifecycle.features] == [*WORKER_ORDER, "marker"]
        assert launcher.services["marker"] is marker
    finally:
        launcher.executor.close()
        launcher.redis.close()
    with pytest.raises(TypeError, match="'markr'"):  # a feature's option under a name no feature has
        Launcher(config, markr=1)
