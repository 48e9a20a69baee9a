"""`sidequest retries|scheduled|dead`: list, show, retry, delete or kill jobs of a sorted set.

One job is named by its JID; many by `--all`, or by a filter (`--class NAME`, `--grep TEXT`, or
both), exactly as the admin API's `retry_all(name=, text=)` takes them (a name is the job's
`class` or the class it wraps, an ActiveJob's, as the lists show it). `list` shows a set in the
dashboard's order (the set's `soonest_first`): retries and scheduled jobs the soonest first, dead
jobs the newest first. Every move goes through
the API's exact-entry atomic calls, so a job another operator (or the dashboard) moved first is
reported as gone, never moved twice.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import click

from sidequest.cli.admin.connect import AdminCommand, admin_client, json_option, redis_errors, redis_url_option
from sidequest.cli.root import Unreachable, UserError, main
from sidequest.errors import PayloadError

if TYPE_CHECKING:
    from sidequest.api import JobSet, SortedEntry

ACTIONS = ("list", "show", "retry", "delete", "kill")


class Kind:
    """One sorted set as the CLI names it: the command, the API class, and how "retry" reads there."""

    def __init__(self, command: str, label: str, retry_verb: str) -> None:
        self.command = command  # retries, scheduled, dead
        self.label = label  # "retry set"...
        self.retry_verb = retry_verb  # what `retry` did, in the past tense

    def set_class(self) -> type[JobSet]:
        from sidequest.api import DeadSet, RetrySet, ScheduledSet

        return {"retries": RetrySet, "scheduled": ScheduledSet, "dead": DeadSet}[self.command]

    def open(self, client: Any) -> JobSet:
        return self.set_class()(client)

    def one(self, action: str) -> Callable[[SortedEntry], bool]:
        """The API call for one entry. Scheduled jobs are not retried but run now (unchanged)."""
        if action == "retry":
            return (lambda e: e.add_to_queue()) if self.command == "scheduled" else (lambda e: e.retry())
        return (lambda e: e.delete()) if action == "delete" else (lambda e: e.kill())

    def many(self, jobs: JobSet, action: str) -> Callable[..., int]:
        if action == "retry":
            return jobs.add_all_to_queue if self.command == "scheduled" else jobs.retry_all
        return jobs.delete_all if action == "delete" else jobs.kill_all


KINDS = (Kind("retries", "retry set", "retried"), Kind("scheduled", "scheduled set", "queued to run now"),
         Kind("dead", "dead set", "retried"))
PAST = {"delete": "deleted", "kill": "killed"}


def run(kind: Kind, action: str, jid: str | None, every: bool, klass: str | None, grep: str | None,
        limit: int, as_json: bool, redis_url: str | None) -> None:
    check(kind, action, jid, every, bool(klass or grep))
    client = admin_client(redis_url)
    jobs = kind.open(client)
    if action == "list":
        list_jobs(kind, jobs, klass, grep, limit, as_json)
    elif jid:
        on_one(kind, jobs, action, jid, as_json)
    else:
        count = kind.many(jobs, action)(name=klass, text=grep)
        report(kind, action, count, {"class": klass, "grep": grep, "all": every}, as_json)


def check(kind: Kind, action: str, jid: str | None, every: bool, filtered: bool) -> None:
    """Refuse, in one line, a command that does not say exactly what to read or act on."""
    command = kind.command
    if action not in ACTIONS:
        raise UserError(f"unknown {command} action {action!r}: use list, show JID, retry, delete or kill")
    if action in ("list", "show") and every:
        raise UserError(f"--all is for retry, delete and kill; `{command} {action}` reads only")
    if action == "list" and jid:
        raise UserError(f"`{command} list` takes no JID; to see one job: sidequest {command} show {jid}")
    if action == "show" and (not jid or filtered):
        raise UserError(f"`{command} show` needs one JID, and no --class or --grep")
    if action in ("list", "show"):
        return
    if not jid and not every and not filtered:
        raise UserError(f"`{command} {action}` needs a JID, --all, or --class NAME/--grep TEXT to say which jobs")
    if jid and (every or filtered):
        raise UserError(f"give either a JID or --all/--class/--grep to `{command} {action}`, not both")
    if every and filtered:
        raise UserError("--all acts on every job; drop it to act on those matching --class/--grep")


def list_jobs(kind: Kind, jobs: JobSet, klass: str | None, grep: str | None, limit: int, as_json: bool) -> None:
    from sidequest.cli.admin import render, views

    filtered = bool(klass or grep)
    if filtered:
        counted = [0]
        found = first(jobs, unique(jobs.select(klass, grep), counted), limit)
        matched = counted[0]
    else:
        found = jobs.page(0, limit, soonest_first=jobs.soonest_first)
    size = jobs.size
    if as_json:
        render.emit_json({"set": jobs.key, "size": size, "jobs": [e.as_dict() for e in found]})
        return
    out = render.console()
    if not found:
        out.print(f"no jobs {'match' if filtered else 'in the ' + kind.label}")
        return
    out.print(views.jobs(found, jobs.key, jobs.client.clock()))
    order = "soonest" if jobs.soonest_first else "newest"
    if filtered and matched > len(found):
        out.print(f"{len(found)} {order} of {matched:,} matching jobs shown; --limit N for more "
                  f"({size:,} in the {kind.label})")
    elif filtered:
        out.print(f"{render.plural(matched, 'matching job')}; {size:,} in the {kind.label}")
    elif size > len(found):
        out.print(f"{len(found)} {order} of {size:,} shown; --limit N for more")


def unique(entries: Iterator[SortedEntry], counted: list[int]) -> Iterator[SortedEntry]:
    """`entries` without repeats (ZSCAN may yield an entry twice while the set changes), counted
    in `counted[0]`."""
    seen: set[bytes] = set()
    for entry in entries:
        digest = hashlib.blake2b(entry.value, digest_size=16).digest()
        if digest not in seen:
            seen.add(digest)
            counted[0] += 1
            yield entry


def first(jobs: JobSet, entries: Iterator[SortedEntry], limit: int) -> list[SortedEntry]:
    """The first `limit` of `entries` in the set's listing order (see `list_jobs`), keeping no more."""
    sign = 1 if jobs.soonest_first else -1
    return heapq.nsmallest(limit, entries, key=lambda e: sign * e.raw_score)


def on_one(kind: Kind, jobs: JobSet, action: str, jid: str, as_json: bool) -> None:
    entry = jobs.find_job(jid)
    if entry is None:
        raise UserError(f"no job {jid} in the {kind.label}")
    if action == "show":
        show(entry, jobs.key, as_json)
        return
    try:
        moved = kind.one(action)(entry)
    except PayloadError as exc:
        raise UserError(str(exc)) from None
    if not moved:
        raise Unreachable(f"job {jid} left the {kind.label} before this command could act (someone else "
                          "moved it first)")
    report(kind, action, 1, {"jid": jid}, as_json)


def show(entry: SortedEntry, set_key: str, as_json: bool) -> None:
    from sidequest.cli.admin import render, views

    if as_json:
        render.emit_json({**entry.as_dict(), "error_backtrace": entry.error_backtrace})
        return
    out = render.console()
    out.print(views.job(entry, set_key))
    if entry.error_backtrace:
        out.print()
        out.print("backtrace (innermost first):")
        for line in entry.error_backtrace:
            out.print("  " + line)


def report(kind: Kind, action: str, count: int, target: dict[str, Any], as_json: bool) -> None:
    from sidequest.cli.admin import render

    verb = kind.retry_verb if action == "retry" else PAST[action]
    if as_json:
        render.emit_json({"set": kind.command, "action": action, "moved": count, **target})
        return
    if "jid" in target:
        click.echo(f"job {target['jid']} {verb}")
        return
    which = " and ".join(f"{name} {value}" for name, value in (("class", target["class"]),
                                                               ("matching", target["grep"])) if value)
    click.echo(f"{render.plural(count, 'job')} of the {kind.label} {verb}{' (' + which + ')' if which else ''}")


def set_command(kind: Kind) -> None:
    """Register `sidequest <kind.command>`."""
    retry_help = "run now" if kind.command == "scheduled" else "back to its queue"

    @main.command(kind.command, cls=AdminCommand, help=f"""List, show, retry ({retry_help}), delete or kill jobs
        of the {kind.label}.

        \b
        Examples:
          sidequest {kind.command}                               # 50, as the dashboard lists them
          sidequest {kind.command} list --class SendWelcome --json
          sidequest {kind.command} show 0123456789abcdef01234567
          sidequest {kind.command} retry 0123456789abcdef01234567
          sidequest {kind.command} delete --class SendWelcome --grep user-42
          sidequest {kind.command} kill --all
        """)
    @click.argument("action", required=False, default="list", metavar="[list|show JID|retry|delete|kill]")
    @click.argument("jid", required=False, metavar="[JID]")
    @click.option("--all", "every", is_flag=True, help="Act on every job of the set.")
    @click.option("--class", "klass", metavar="NAME",
                  help="Only jobs of this name (as listed: an ActiveJob's own class, or its wrapper's).")
    @click.option("--grep", metavar="TEXT", help="Only jobs whose stored JSON contains TEXT (case-sensitive).")
    @click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1), help="Jobs `list` shows.")
    @json_option
    @redis_url_option
    @redis_errors
    def command(action: str, jid: str | None, every: bool, klass: str | None, grep: str | None, limit: int,
                as_json: bool, redis_url: str | None) -> None:
        run(kind, action, jid, every, klass, grep, limit, as_json, redis_url)


for _kind in KINDS:
    set_command(_kind)
