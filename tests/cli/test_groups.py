"""`sidequest groups QUEUE`: a queue's groups as a table (or JSON), largest first, its jobs
waiting per priority level, `--pause G` / `--resume G` / `--reset G`; mistakes are one line."""

from __future__ import annotations

import json

import pytest
from helpers import cli_ok as ok
from lane_state import laned, scene

from sidequest.api import groups

XSS = "<script>alert(1)</script>"




@pytest.fixture
def mail(client) -> None:
    scene(client, "mail")
    laned(client, "mail", 2, group="[bold]b[/bold]", group_rate=(10, 1.5))


def table_rows(output: str) -> list[list[str]]:
    """The rows under the GROUP header, split on runs of two spaces or more."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("GROUP"))
    return [[cell.strip() for cell in line.strip().split("  ") if cell.strip()]
            for line in lines[start + 2:] if line.strip()]


def test_groups_lists_the_largest_first_with_levels_as_text(cli, mail):
    text = ok(cli("groups", "mail"))
    assert "queue mail: 4 groups; waiting by priority: 9: 10, 5: 10, 0: 7" in text
    assert table_rows(text) == [["tenant-b", "10", "0", "-", "10 per 60 s", "1"],
                                ["tenant-a", "5", "1", "-", "-", "1"], ["tenant-c", "3", "0", "2", "-", "1"],
                                ["[bold]b[/bold]", "2", "0", "-", "10 per 1.5 s", "1"]]


def test_groups_json(cli, mail):
    document = json.loads(ok(cli("groups", "mail", "--json", "--limit", "1")))
    assert document == {"queue": "mail", "levels": {"9": 10, "5": 10, "0": 7},
                        "groups": [{"name": "tenant-b", "waiting": 10, "running": 0, "paused": False,
                                    "concurrency": None, "rate": [10, 60.0], "weight": 1, "overridden": []}]}


def test_pause_and_resume_a_group(cli, client, mail):
    said = ok(cli("groups", "mail", "--pause", XSS))
    assert said.startswith(f"paused group {XSS} of queue mail") and len(said.strip().splitlines()) == 2  # and a note
    assert "no jobs in queue mail" in said
    ok(cli("groups", "mail", "--pause", "tenant-a"))
    assert {g.name for g in groups("mail", client=client) if g.paused} == {XSS, "tenant-a"}
    assert ["tenant-a", "5", "1", "-", "-", "1", "paused"] in table_rows(ok(cli("groups", "mail")))
    assert ok(cli("groups", "mail", "--resume", "tenant-a")) == "resumed group tenant-a of queue mail\n"
    assert json.loads(ok(cli("groups", "mail", "--resume", XSS, "--json"))) == {
        "queue": "mail", "group": XSS, "paused": False}
    assert [g.name for g in groups("mail", client=client) if g.paused] == []


def test_reset_gives_a_groups_slots_back(cli, client, mail):
    assert ok(cli("groups", "mail", "--reset", "tenant-a")) == (
        "reset group tenant-a of queue mail: gave back 1 slot; its jobs still running go on\n")
    assert [g.running for g in groups("mail", client=client) if g.name == "tenant-a"] == [0]
    assert json.loads(ok(cli("groups", "mail", "--reset", "tenant-c", "--json"))) == {
        "queue": "mail", "group": "tenant-c", "slots_given_back": 0}


def test_a_queue_without_groups_says_so(cli, client):
    client.push("Echo", [1], queue="plain")
    assert ok(cli("groups", "plain")) == "queue plain has no groups and no laned jobs waiting\n"


@pytest.mark.parametrize(("args", "says"), [
    (["groups"], "Missing argument 'QUEUE'"),
    (["groups", "nosuchqueue"], "no queue named 'nosuchqueue'"),
    (["groups", "mail", "--pause", "a", "--resume", "b"], "one of --pause, --resume, --reset, --set and --clear"),
    (["groups", "mail", "--pause", ""], "GROUP must not be empty"),
    (["groups", "mail", "--reset", "a", "--pause", "b"], "one of --pause, --resume, --reset, --set and --clear"),
    (["groups", "mail", "--resume", "tenant-typo"], "group 'tenant-typo' of queue mail is not paused"),
    (["groups", "mail", "--limit", "0"], "--limit"),
])
def test_user_errors_are_one_line_and_exit_2(cli, mail, args, says):
    result = cli(*args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in result.output


def test_set_and_clear_a_groups_limits(cli, client, mail):
    said = ok(cli("groups", "mail", "--set", "tenant-a", "--weight", "4", "--rate", "100/60"))
    assert said == ("group tenant-a of queue mail: weight 4, concurrency none, rate 100 per 60 s; "
                    "set by an operator: rate, weight\n")
    assert ["tenant-a*", "5", "1", "-", "100 per 60 s", "4"] in table_rows(ok(cli("groups", "mail")))
    assert json.loads(ok(cli("groups", "mail", "--clear", "tenant-a", "--json")))["overridden"] == []
    assert [g.weight for g in groups("mail", client=client) if g.name == "tenant-a"] == [1]


@pytest.mark.parametrize(("args", "said"), [
    (["--weight", "2"], "go with --set GROUP"), (["--set", "a", "--rate", "ten"], "--rate must be COUNT/SECONDS"),
    (["--set", "a"], "give weight="), (["--set", "a", "--clear", "a"], "not several"),
])
def test_a_wrong_set_is_one_line(cli, mail, args, said):
    result = cli("groups", "mail", *args)
    assert result.exit_code != 0 and said in result.output and "Traceback" not in result.output
