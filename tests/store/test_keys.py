"""Every Redis key name is built in `keys.py`; a key literal anywhere else fails this test."""

import ast
from pathlib import Path

import sidequest

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
