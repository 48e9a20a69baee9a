"""A job's parameters: read once from its signature, bound to every push's arguments.

    signature = function_signature(send)                # (user_id: int, *, template: str = 'welcome')
    bind("app.send", signature, [1, 2, 3])              # JobArgumentError: ... too many positional arguments
    bind("app.send", signature, [1], {"templat": "x"})  # JobArgumentError: ... unexpected keyword argument

A push's positional arguments (the payload's `args`) and keyword arguments (its `kwargs`) must
fit the job's parameters. Checking this at push, before anything is written, turns a job that
would fail on every attempt in the worker into an error at the call site. A signature that
cannot be read (some C callables) leaves pushes unchecked.
"""

from __future__ import annotations

import inspect
import reprlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sidequest.errors import JobArgumentError

_shown = reprlib.Repr()  # what a refused push was given, cut short
_shown.maxlist, _shown.maxstring, _shown.maxother = 6, 40, 40


def function_signature(fn: Callable[..., Any]) -> inspect.Signature | None:
    """The parameters of a `@job` function, or None if they cannot be read."""
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):
        return None


def perform_signature(job_class: type) -> inspect.Signature | None:
    """The parameters of a Job class's `perform` as `perform_async` takes them: without self."""
    try:
        raw = inspect.getattr_static(job_class, "perform")
        if isinstance(raw, (staticmethod, classmethod)):
            return inspect.signature(raw.__get__(None, job_class))  # what `cls.perform` gives
        signature = inspect.signature(raw)
    except (AttributeError, TypeError, ValueError):
        return None
    params = list(signature.parameters.values())
    if params and params[0].kind in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD):
        params = params[1:]  # self; a leading *args takes self in with the rest
    return signature.replace(parameters=params)


# signature -> (fewest, most positional arguments; None: any number), for signatures whose fit
# depends on the count alone; kept with its signature so the id is never reused meanwhile
_ARITY: dict[int, tuple[inspect.Signature, tuple[int, int | None] | None]] = {}


def arity(signature: inspect.Signature) -> tuple[int, int | None] | None:
    """How many positional arguments fit `signature`, when that is all a positional call is
    checked on (no required keyword-only parameter); else None."""
    cached = _ARITY.get(id(signature))
    if cached is not None and cached[0] is signature:
        return cached[1]
    fewest, counted = 0, True
    most: int | None = 0
    for param in signature.parameters.values():
        if param.kind in (param.POSITIONAL_ONLY, param.POSITIONAL_OR_KEYWORD):
            most = most + 1 if most is not None else None
            fewest += param.default is param.empty
        elif param.kind is param.VAR_POSITIONAL:
            most = None
        elif param.kind is param.KEYWORD_ONLY and param.default is param.empty:
            counted = False  # never satisfied by positional arguments: Signature.bind says why
    found = (fewest, most) if counted else None
    _ARITY[id(signature)] = (signature, found)
    return found


def bind(job_name: str, signature: inspect.Signature | None, args: Sequence[Any],
         kwargs: Mapping[str, Any] | None = None) -> None:
    """Raise JobArgumentError naming the job, its parameters and what was given unless `args`
    and `kwargs` fit."""
    if signature is None:
        return
    if not kwargs:
        fit = arity(signature)
        if fit is not None and fit[0] <= len(args) and (fit[1] is None or len(args) <= fit[1]):
            return  # every positional push's path: the count is all there is to check (Signature.bind ~3 µs)
    try:
        signature.bind(*args, **(kwargs or {}))
    except TypeError as exc:
        count = f"{len(args)} argument{'' if len(args) == 1 else 's'}"
        keywords = f" and keywords ({', '.join(f'{key}=' for key in kwargs)})" if kwargs else ""
        raise JobArgumentError(
            f"job {job_name} takes {display(signature)}, got {count} {_shown.repr(list(args))}{keywords}: {exc}"
        ) from None


class _Annotation:
    """Shows a string annotation (`from __future__ import annotations`) unquoted."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def display(signature: inspect.Signature) -> str:
    """`(path: str, width: int)`: the parameters as written, without the return annotation."""
    params = [p.replace(annotation=_Annotation(p.annotation)) if isinstance(p.annotation, str) else p
              for p in signature.parameters.values()]
    return str(signature.replace(parameters=params, return_annotation=inspect.Signature.empty))
