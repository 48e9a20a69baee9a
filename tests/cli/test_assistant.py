"""`sidequest mcp` (cli/assistant.py): a real MCP session over stdio, with the `mcp` package's own
client, against a real Redis: the tools are listed (each marked read-only), a queue's latency is
read, a running job is seen, a search and a job's history answer, and while the tools run Redis
counts no write command (INFO commandstats, checked against COMMAND INFO's flags)."""

from __future__ import annotations

import json
import time

import anyio
import pytest
from conftest import PYTHON, python_env, wait_until
from helpers import ran
from jobs_for_tests import work

from sidequest.api import Workers
from sidequest.jobs.payload import encode, new_jid

mcp = pytest.importorskip("mcp", reason="the mcp extra: pip install 'sidequest[mcp]'")
GATE = "test:assistant-gate"


async def session_run(redis_url: str, calls: list[tuple[str, dict]], between=None) -> tuple[list, list]:
    """Start `sidequest mcp`, list its tools, then (after `between()`) call each tool; the tools and
    each call's decoded JSON answer."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=PYTHON, args=["-m", "sidequest.cli", "mcp", "--redis-url", redis_url],
                                   env=python_env())
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = (await session.list_tools()).tools
        if between is not None:
            between()
        answers = []
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            assert not result.is_error, result.content
            answers.append(json.loads(result.content[0].text))
        return tools, answers


def test_an_assistant_reads_latency_busy_search_and_history_and_writes_nothing(client, r, redis_url, start):
    old = {"class": "Echo", "args": ["customer-42"], "queue": "mail", "jid": new_jid(), "retry": True,
           "created_at": time.time() - 120, "enqueued_at": time.time() - 120}
    r.lpush("queue:mail", encode(old))
    r.sadd("queues", "mail")
    running = client.push(work, [1, 60, GATE])
    worker = start(concurrency=2)
    wait_until(lambda: any(w.job.jid == running for w in Workers(client)), 30, 0.05, "the job to be running")
    _, [busy] = anyio.run(session_run, redis_url, [("busy", {})])
    assert [job["jid"] for job in busy["running"]] == [running] and len(busy["processes"]) == 1
    r.set(GATE, 1)
    wait_until(lambda: len(ran(r, "work-done")) == 1, 30, 0.05, "the job to end")
    worker.stop()

    def counting() -> None:
        r.config_resetstat()

    tools, [queues, found, history, nothing] = anyio.run(session_run, redis_url, [
        ("queues", {}), ("search", {"args": "customer-42"}), ("job", {"jid": old["jid"]}),
        ("job", {"jid": "f" * 24})], counting)
    stats = r.info("commandstats")
    assert {tool.name for tool in tools} == {"queues", "busy", "search", "job"}
    assert all(tool.annotations.read_only_hint for tool in tools)
    [mail] = [q for q in queues["queues"] if q["name"] == "mail"]
    assert mail["size"] == 1 and 119 < mail["latency"] < 600
    assert [(h["where"], h["jid"]) for h in found["hits"]] == [("queue", old["jid"])] and found["cursor"] is None
    assert history["state"] == "queued" and history["job"]["args"] == ["customer-42"]
    assert nothing["state"] == "unknown"

    assert "write" in _flags(r.execute_command("COMMAND", "INFO", "lpush"), "lpush")  # the check can see a write
    sent = {name.removeprefix("cmdstat_") for name in stats} - {"config|resetstat", "info"}
    assert {"lrange", "smembers"} <= sent, sent  # the tools' reads were counted
    for command in sent:
        info = r.execute_command("COMMAND", "INFO", *command.split("|"))
        flags = _flags(info, command)
        assert "write" not in flags, f"{command} is a write command"


def _flags(info, command: str) -> set[str]:
    """The flags COMMAND INFO gives for `command` (a subcommand `a|b` is looked up in its parent)."""
    [entry] = info.values() if isinstance(info, dict) else info
    if "|" in command and isinstance(entry, dict):
        subs = {s["name"] if isinstance(s, dict) else s[0]: s for s in entry.get("subcommands", [])}
        entry = subs.get(command, entry)
    flags = entry["flags"] if isinstance(entry, dict) else entry[2]
    return {f.decode() if isinstance(f, bytes) else str(f) for f in flags}
