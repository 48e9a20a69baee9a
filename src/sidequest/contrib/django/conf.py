"""The `SIDEQUEST = {...}` Django setting, read into one `sidequest.Config`.

    SIDEQUEST = {
        "redis_url": "redis://localhost:6379/0",
        "queues": ["critical,3", "default,1"],
        "concurrency": 5,
        "server_middleware": ["myapp.middleware.Timing"],   # classes, callables or dotted paths
    }

Keys are `Config`'s field names, laid over the environment (`REDIS_URL`, `SIDEQUEST_*`) as
`Config.from_env(**overrides)` does. A key `Config` does not have is refused in one line that
names the nearest known one.

`manage.py sidequest ...` runs the click CLI, which reads its settings from the environment, a
`-C` file and flags (and a `--processes` child is a fresh interpreter that reads the same).
`cli_environment` writes the setting in that environment's language (`SIDEQUEST_<NAME>`), so
the CLI's layering stays as documented: flags beat a `-C` file, which beats `SIDEQUEST`.
Middleware and periodic entries cannot be written there; the worker hook (`worker`) adds them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from sidequest.config import Config, did_you_mean
from sidequest.errors import ConfigError
from sidequest.jobs.middleware import Chain

FIELDS = tuple(f.name for f in dataclasses.fields(Config))
CHAINS = ("client_middleware", "server_middleware")
NOT_IN_ENVIRONMENT = (*CHAINS, "periodic")  # set by the worker hook instead


def check_keys(values: Mapping[str, Any]) -> None:
    """ImproperlyConfigured for the first key that is not a `Config` field."""
    if not isinstance(values, Mapping):
        raise ImproperlyConfigured(f"SIDEQUEST must be a dict of Config settings, got {type(values).__name__}")
    for key in values:
        if key not in FIELDS:
            raise ImproperlyConfigured(f"SIDEQUEST: unknown setting {key!r}{did_you_mean(str(key))}")


def links(key: str, value: Any) -> list[Any]:
    """A middleware setting as a list of links: classes or callables, or dotted paths to them."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ImproperlyConfigured(f"SIDEQUEST: {key} must be a list of middleware classes or dotted paths")
    found = []
    for link in value:
        if isinstance(link, str):
            try:
                link = import_string(link)
            except ImportError as exc:
                raise ImproperlyConfigured(f"SIDEQUEST: {key}: cannot import {link!r}: {exc}") from None
        found.append(link)
    return found


def chain(key: str, items: list[Any]) -> Chain:
    """A chain like the one `Config` makes by default (and so around the same process-wide links)."""
    built: Chain = getattr(Config(), key)
    for link in items:
        built.add(link)
    return built


def config_from_settings(values: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None) -> Config:
    """`Config` from the `SIDEQUEST` setting (None: the environment alone), or ImproperlyConfigured."""
    values = {} if values is None else values
    check_keys(values)
    given = dict(values)
    for key in CHAINS:
        if key in given and not isinstance(given[key], Chain):
            given[key] = chain(key, links(key, given[key]))
    for key in ("queues", "labels", "require", "periodic"):
        if isinstance(given.get(key), list):
            given[key] = tuple(given[key])
    try:
        return Config.from_env(environ, **given)
    except ConfigError as exc:
        raise ImproperlyConfigured(f"SIDEQUEST: {exc}") from None


def cli_environment(values: Mapping[str, Any], config: Config) -> dict[str, str | None]:
    """The `SIDEQUEST_<NAME>` variables that give the CLI the settings named in `values`
    (None: unset the variable, so the environment cannot bring back what the setting cleared)."""
    env: dict[str, str | None] = {}
    for key in values:
        if key in NOT_IN_ENVIRONMENT:
            continue
        env[f"SIDEQUEST_{key.upper()}"] = encode(key, getattr(config, key))
    return env


def encode(key: str, value: Any) -> str | None:
    """A setting's value as `Config.from_env` reads it back."""
    if value is None:
        return None
    if key == "queues":
        return " ".join(f"{name},{weight}" if weight else name for name, weight in value)
    if isinstance(value, tuple):
        return " ".join(str(item) for item in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)
