"""docs/deployment.md's Kubernetes section as a reader would apply it: every YAML block parses,
every `sidequest ...` command it names (in the YAML or in the text) is one this CLI accepts with
the flags it uses (parsed by the click commands themselves, nothing run), the probes reach the
worker's health port, the grace period follows the rule the section states, and the scalers
read a list and series that exist (a real `/metrics` scrape)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

import click
import pytest
import yaml
from conftest import ROOT
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from sidequest.cli import main
from sidequest.web import create_app

GRACE_MARGIN = 10  # the rule the section states: terminationGracePeriodSeconds >= -t + 10


def section() -> str:
    text = (ROOT / "docs" / "deployment.md").read_text()
    [found] = re.findall(r"^## Kubernetes\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    return found


def documents() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", section(), re.S)
    assert len(blocks) == 3, "worker, scale on backlog, scale on latency"
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc is not None]


def lists_in(node: Any) -> Iterator[list[Any]]:
    if isinstance(node, list):
        yield node
        for item in node:
            yield from lists_in(item)
    elif isinstance(node, dict):
        for value in node.values():
            yield from lists_in(value)


def commands() -> list[list[str]]:
    """Every `sidequest ...` command: exec lists in the YAML and code spans in the text."""
    found = [[str(x) for x in node] for doc in documents() for node in lists_in(doc)
             if node and node[0] == "sidequest"]
    prose = re.sub(r"```.*?```", "", section(), flags=re.S)
    found += [shlex.split(span) for span in re.findall(r"`(sidequest [^`]+)`", prose)]
    return found


def subcommand(name: str) -> click.Command:
    with click.Context(main) as ctx:
        command = main.get_command(ctx, name)
    assert command is not None, f"`sidequest {name}` is no command"
    return command


def deployment() -> dict[str, Any]:
    [found] = [d for d in documents() if d["kind"] == "Deployment"]
    return found


def worker_container() -> dict[str, Any]:
    [container] = deployment()["spec"]["template"]["spec"]["containers"]
    return container


def option(command: list[str], *names: str) -> str:
    return next(command[i + 1] for i, arg in enumerate(command) if arg in names)


def test_every_yaml_block_parses_into_the_objects_it_names():
    kinds = [(d["apiVersion"], d["kind"]) for d in documents()]
    assert kinds == [("v1", "Secret"), ("apps/v1", "Deployment"), ("keda.sh/v1alpha1", "TriggerAuthentication"),
                     ("keda.sh/v1alpha1", "ScaledObject"), ("keda.sh/v1alpha1", "ScaledObject")]


def test_every_command_exists_with_the_flags_it_uses():
    found = commands()
    assert {c[1] for c in found} == {"worker", "health"}
    for command in found:
        assert command[0] == "sidequest"
        name, args = command[1], command[2:]
        try:
            subcommand(name).make_context(name, list(args), parent=click.Context(main))
        except click.ClickException as exc:
            pytest.fail(f"{shlex.join(command)}: {exc.format_message()}")


def test_the_worker_runs_in_exec_form_within_the_grace_period():
    container = worker_container()
    assert "args" not in container and isinstance(container["command"], list)  # no shell in between
    command = container["command"]
    assert command[:2] == ["sidequest", "worker"]
    grace = deployment()["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert float(option(command, "-t", "--timeout")) + GRACE_MARGIN <= grace
    assert "preStop" not in container.get("lifecycle", {})  # the section says why not


def test_the_probes_ask_the_workers_health_port():
    container = worker_container()
    port = int(option(container["command"], "--health-port"))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    paths = {}
    for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[kind]["httpGet"]
        assert ports.get(get["port"], get["port"]) == port
        paths[kind] = get["path"]
    assert paths == {"startupProbe": "/live", "livenessProbe": "/live", "readinessProbe": "/ready"}


def test_the_scalers_read_what_sidequest_writes(client):
    """The redis scaler's list is a queue the Deployment works, under Sidekiq's name; every
    series the prometheus scaler queries is one /metrics exports."""
    from jobs_for_tests import echo

    client.push(echo, [1])  # a queue, so the per-queue series have a sample
    objects = [d for d in documents() if d["kind"] == "ScaledObject"]
    assert all(o["spec"]["scaleTargetRef"]["name"] == deployment()["metadata"]["name"] for o in objects)
    triggers = [t for o in objects for t in o["spec"]["triggers"]]
    command = worker_container()["command"]
    queues = {command[i + 1] for i, arg in enumerate(command) if arg in ("-q", "--queue")}
    lists = [t["metadata"]["listName"] for t in triggers if t["type"] == "redis"]
    assert lists and all(name.removeprefix("queue:") in queues for name in lists)
    response = TestClient(create_app(client)).get("/metrics")
    exported = {s.name for family in text_string_to_metric_families(response.text) for s in family.samples}
    queried = {name for t in triggers if t["type"] == "prometheus"
               for name in re.findall(r"\bsidequest_\w+", t["metadata"]["query"])}
    assert queried and queried <= exported, queried - exported
