"""Every Redis key name is built in `keys.py`; a key literal anywhere else fails this test."""

import ast
import inspect
import re
from pathlib import Path

import sidequest
from sidequest.store import keys

SRC = Path(sidequest.__file__).parent
PREFIXES = ("queue:", "stat:", "sidequest:")
REDIS_COMMANDS = {
    "lpush", "rpush", "lpop", "rpop", "brpop", "blpop", "lrange", "llen", "lrem", "lmove", "blmove",
    "sadd", "srem", "smembers", "sismember", "zadd", "zrem", "zrange", "zrangebyscore", "zcard",
    "zremrangebyscore", "zremrangebyrank", "hset", "hget", "hgetall", "hdel", "hincrby", "hmget",
    "incrby", "expire", "unlink", "exists", "scan_iter", "eval", "evalsha",
}


def _key_literals(tree: ast.AST):
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and node.value.startswith(PREFIXES) and " " not in node.value):
            yield node.lineno, node.value
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in REDIS_COMMANDS and node.args
                and isinstance(node.args[0], (ast.Constant, ast.JoinedStr))
                and not (isinstance(node.args[0], ast.Constant) and not isinstance(node.args[0].value, str))):
            yield node.lineno, ast.unparse(node)


def test_key_literals_live_only_in_keys_module():
    offenders = []
    for path in SRC.rglob("*.py"):
        if path.name == "keys.py":
            continue
        for line, text in _key_literals(ast.parse(path.read_text())):
            offenders.append(f"{path.relative_to(SRC)}:{line}: {text}")
    assert offenders == []


def test_the_check_catches_a_literal():
    sample = "def f(r):\n    r.lpush('queue:x', 1)\n    r.zadd(f'{p}retry', {})\n"
    assert len(list(_key_literals(ast.parse(sample)))) == 3


# -- every key kind of sidequest's own is in the own-keys table of docs/sidekiq-compatibility.md --
OWN_KEYS_DOC = Path(__file__).parents[2] / "docs" / "sidekiq-compatibility.md"
PLACEHOLDER = re.compile(r"<[^<>]*>")


def _sample_calls(builder) -> list[tuple]:
    """Arguments to call a key builder with: a placeholder per parameter (`<jid>`), with and
    without its defaulted ones; `flow`'s kind as `flow.KINDS` names them (a record's key: the
    option, with a digest; a count's: what is counted, without)."""
    from sidequest.features.flow import KINDS

    params = inspect.signature(builder).parameters
    if "kind" in params:
        return [call for option, _, counted in KINDS
                for call in ((option, "<queue>", "<digest>"), (counted, "<queue>"))]
    required = [name for name, p in params.items() if p.default is inspect.Parameter.empty]
    return [tuple(f"<{name}>" for name in params), tuple(f"<{name}>" for name in required)]


def built_own_keys() -> dict[str, str]:
    """Every `sidequest:` key name store/keys.py builds for one Redis, each with what built it:
    its constants, and its functions and the Keyspace's methods called with placeholders."""
    prefix = keys.PREFIX + ":"
    found = {value: name for name, value in vars(keys).items() if isinstance(value, str) and value.startswith(prefix)}
    builders = [(name, fn) for name, fn in vars(keys).items()
                if inspect.isfunction(fn) and fn.__module__ == keys.__name__]
    builders += [(f"Keyspace.{name}", getattr(keys.DEFAULT, name)) for name, fn in vars(keys.Keyspace).items()
                 if inspect.isfunction(fn)]
    for name, builder in builders:
        for args in _sample_calls(builder):
            try:
                built = builder(*args)
            except (TypeError, ValueError, IndexError):
                continue  # not a key builder (it reads a key, or a client)
            for key in built if isinstance(built, list) else [built]:
                if isinstance(key, str) and key.startswith(prefix):
                    found.setdefault(key, name)
    return found


def documented_own_keys(text: str) -> list[re.Pattern[str]]:
    """The key patterns of the own-keys table of `text` (its first column): `<x>` stands for any
    name, `...:events` and `:events` for the cell's first key followed by `:events`."""
    table = text[text.index("sidequest's own keys sit under"):].split("\n\n")[1]
    patterns = []
    for row in table.splitlines()[2:]:
        names = re.findall(r"`([^`]+)`", row.split("|")[1])
        for name in names:
            full = names[0] + name.removeprefix("...") if name.startswith((":", "...:")) else name
            patterns.append(re.compile(".+".join(re.escape(part) for part in PLACEHOLDER.split(full))))
    return patterns


def undocumented_own_keys(text: str) -> list[str]:
    """The keys store/keys.py builds that no row of the own-keys table of `text` describes."""
    documented = documented_own_keys(text)
    return sorted(f"{key} (from {name})" for key, name in built_own_keys().items()
                  if not any(p.fullmatch(PLACEHOLDER.sub("x", key)) for p in documented))


def test_every_own_key_kind_is_in_the_documented_table():
    missing = undocumented_own_keys(OWN_KEYS_DOC.read_text())
    assert missing == [], f"add these to the own-keys table of docs/sidekiq-compatibility.md: {missing}"


def test_the_table_check_sees_a_row_missing():
    rows = OWN_KEYS_DOC.read_text().splitlines(keepends=True)
    without = "".join(row for row in rows if not row.startswith("| `sidequest:metrics:"))
    assert undocumented_own_keys(without) == ["sidequest:metrics:<minute> (from metrics)",
                                              "sidequest:metrics:<minute>:latency (from metrics_latency)"]
