"""Celery's canvas on workflows: `chain`, `group` and `chord`, each started with `perform_async`.

    sidequest.chain(sub.s(10, 1), sub.s(100)).perform_async()              # sub(10, 1), then sub(9, 100)
    (sub.s(10, 1) | sub.s(100))().get(timeout=10)                          # the same, Celery's way: -91
    (sidequest.group(price.s("a"), price.s("b")) | total.s()).delay()      # a group | a step: a chord
    sidequest.group([resize.s(p) for p in paths]).perform_async()          # in parallel
    sidequest.chord([price.s(sku) for sku in skus], notify.s("ops")).perform_async()  # notify([p1, ...], "ops")
    sidequest.group([price.s(sku) for sku in skus]).apply_async().get(timeout=10)   # [p1, p2, ...]
    sidequest.chain(sub.s(10, 1), sub.s(100)).apply_async().get(timeout=10)         # -91

Arguments follow Celery's order: a mutable step's dependencies' result (or list of results)
comes first, before the arguments its signature gives. Each builds a `WorkflowBuilder`
(`.workflow()`) whose steps are named "1", "2", ... in the order they run; `perform_async`
returns the workflow's id; `apply_async` (or `delay`, or calling it, as Celery's `chain(...)()`)
Celery's handle, `.id` and `.get()`: a group's `GroupResult` (the list), a chain's or chord's
`ChainResult` (the last step's value). They nest: a chain may hold groups (the step after a group
gets the list of its results, as a chord's callback), a group may hold chains. `a | b` chains any
two of steps, chains and groups, as Celery's `|` does (`pipe`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sidequest.client.sync_client import Client
from sidequest.features.workflows.builder import TTL, Collect, WorkflowBuilder
from sidequest.features.workflows.handle import ChainResult, GroupResult
from sidequest.features.workflows.signature import Signature


class Canvas:
    """What chain, group and chord share: built into a workflow, started with `perform_async`."""

    def workflow(self, name: str = "") -> WorkflowBuilder:
        builder = WorkflowBuilder(name)
        self.place(builder, (), "none")
        return builder

    def perform_async(self, *, name: str = "", client: Client | None = None, ttl: float = TTL) -> str:
        """Start it; return the workflow's id (`sidequest.Workflow.find(id)`)."""
        return self.workflow(name).perform_async(client=client, ttl=ttl)

    def place(self, builder: WorkflowBuilder, after: tuple[str, ...], collect: Collect) -> tuple[str, ...]:
        """Add this part's steps after `after`; return the names of its last steps."""
        raise NotImplementedError

    def ends_in_group(self) -> bool:
        return False

    def __or__(self, other: Item) -> Chain:
        """`canvas | step`: Celery's chain of the two (see `pipe`)."""
        return pipe(self, other)


Item = Signature | Canvas


def pipe(left: object, right: object) -> Chain:
    """`left | right` for steps, chains and groups, as Celery's `|`: one chain of left's steps,
    then right's (a chain is flattened; a group stays one item, so the step after it gets the list
    of its results: `group | step` is a chord)."""
    return Chain(*_links(left), *_links(right))


def _links(item: object) -> tuple[Item, ...]:
    if isinstance(item, Chain):
        return item.items
    if isinstance(item, (Signature, Canvas)):
        return (item,)
    raise TypeError(f"`|` joins workflow steps (job.s(...), job.si(...)), chains, groups and chords, got {item!r}")


Signature.pipe = pipe  # `step | other` (see Signature.pipe)


def _items(items: tuple[Any, ...]) -> list[Any]:
    """Celery's two spellings: the parts one by one (`group(a, b)`) or one iterable (`group([a, b])`)."""
    if len(items) == 1 and not isinstance(items[0], (Signature, Canvas)) and isinstance(items[0], Iterable):
        return list(items[0])
    return list(items)


def _place(item: Any, builder: WorkflowBuilder, after: tuple[str, ...], collect: Collect) -> tuple[str, ...]:
    if isinstance(item, Canvas):
        return item.place(builder, after, collect)
    if not isinstance(item, Signature):
        raise TypeError(f"a canvas holds signatures (job.s(...)), groups and chains, got {item!r}")
    name = str(len(builder.steps) + 1)
    builder.add_step(name, item, after, "none" if item.immutable else collect)
    return (name,)


class Chain(Canvas):
    """Steps one after the other, each result passed on to the next mutable step (its first argument)."""

    def __init__(self, *items: Item | Iterable[Item]) -> None:
        self.items: tuple[Item, ...] = tuple(_items(items))
        if not self.items:
            raise ValueError("a chain needs at least one step")

    def place(self, builder: WorkflowBuilder, after: tuple[str, ...], collect: Collect) -> tuple[str, ...]:
        for index, item in enumerate(self.items):
            if index:
                before = self.items[index - 1]
                collect = "list" if isinstance(before, Canvas) and before.ends_in_group() else "one"
            after = _place(item, builder, after, collect)
        return after

    def ends_in_group(self) -> bool:
        last = self.items[-1]
        return isinstance(last, Canvas) and last.ends_in_group()

    def apply_async(self, *, name: str = "", client: Client | None = None, ttl: float = TTL) -> ChainResult:
        """Start it, as `perform_async`; return Celery's handle on it (`.id`, `.get(timeout=)`:
        the last step's value, a chord's callback's)."""
        return ChainResult(self.perform_async(name=name, client=client, ttl=ttl), client)

    def delay(self) -> ChainResult:
        """Celery's `chain(...).delay()`: `apply_async()` with the defaults."""
        return self.apply_async()

    __call__ = apply_async  # Celery's `chain(...)()` starts it too (a step called is run inline there)


class Group(Canvas):
    """Steps in parallel; the step after a group gets their results as one list, in order."""

    def __init__(self, *items: Item | Iterable[Item]) -> None:
        self.items: list[Item] = _items(items)
        if not self.items:
            raise ValueError("a group needs at least one step")

    def place(self, builder: WorkflowBuilder, after: tuple[str, ...], collect: Collect) -> tuple[str, ...]:
        ends: list[str] = []
        for item in self.items:
            ends += _place(item, builder, after, collect)
        return tuple(ends)

    def ends_in_group(self) -> bool:
        return True

    def apply_async(self, *, name: str = "", client: Client | None = None, ttl: float = TTL) -> GroupResult:
        """Start it, as `perform_async`; return Celery's handle on it (`.id`, `.get(timeout=)`)."""
        return GroupResult(self.perform_async(name=name, client=client, ttl=ttl), client)

    def delay(self) -> GroupResult:
        """Celery's `group(...).delay()`: `apply_async()` with the defaults."""
        return self.apply_async()

    __call__ = apply_async  # Celery's `group(...)()`


def chain(*items: Item | Iterable[Item]) -> Chain:
    """Steps one after the other: `chain(a.s(), b.s())`, or `chain([a.s(), b.s()])`."""
    return Chain(*items)


def group(*items: Item | Iterable[Item]) -> Group:
    """Steps in parallel: `group(a.s(1), a.s(2))`, or `group(a.s(n) for n in numbers)`."""
    return Group(*items)


def chord(header: Group | Iterable[Item], callback: Item) -> Chain:
    """A group, then `callback`, which gets the list of the group's results."""
    return Chain(header if isinstance(header, Group) else Group(header), callback)


def workflow(name: str = "") -> WorkflowBuilder:
    """An empty workflow to `add` named steps to (see `builder`)."""
    return WorkflowBuilder(name)
