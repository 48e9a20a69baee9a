"""`sidequest search`: one search over queues, lanes, scheduled, retry and dead (`api.Search`).

A page at a time: it prints the matches of one page and, when the walk has not reached the end,
the command that reads the next (`--cursor`), so a large Redis is read in bounded pages and the
operator stops whenever they like. `retry`, `delete` and `kill` act on every match (the API's
`retry_all`, `delete_all`, `kill_all`: exact-entry atomic moves).
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import click

from sidequest.cli.admin.connect import AdminCommand, admin_client, json_option, redis_errors, redis_url_option
from sidequest.cli.root import UserError, main

if TYPE_CHECKING:
    from sidequest.api import Search, SearchPage

ACTIONS = ("list", "retry", "delete", "kill")
PAST = {"retry": "retried (scheduled: queued to run now)", "delete": "deleted", "kill": "killed"}


@main.command("search", cls=AdminCommand, help="""Find jobs in every queue, lane, scheduled, retry and dead set.

    \b
    Examples:
      sidequest search --class SendInvoice --args customer-42
      sidequest search --error Timeout --in retry --in dead --json
      sidequest search --class SendInvoice --cursor eyJ...    # the next page
      sidequest search retry --class SendInvoice --args customer-42
    """)
@click.argument("action", required=False, default="list", metavar="[list|retry|delete|kill]")
@click.option("--class", "klass", metavar="NAME", help="Jobs of this name (as listed: an ActiveJob's own class).")
@click.option("--jid", metavar="JID", help="The job of this jid.")
@click.option("--args", "args", metavar="TEXT", help="Jobs whose arguments (as JSON) contain TEXT.")
@click.option("--grep", metavar="TEXT", help="Jobs whose stored JSON contains TEXT (case-sensitive).")
@click.option("--error", metavar="TEXT", help="Jobs whose error class or message contains TEXT.")
@click.option("--queue", metavar="NAME", help="Jobs of this queue only.")
@click.option("--in", "where", multiple=True, type=click.Choice(["queue", "lane", "scheduled", "retry", "dead"]),
              help="Look only here (repeat it for several); default: everywhere.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(min=1), help="Matches a page shows.")
@click.option("--cursor", metavar="CURSOR", help="Resume where the previous page stopped.")
@json_option
@redis_url_option
@redis_errors
def command(action: str, klass: str | None, jid: str | None, args: str | None, grep: str | None,
            error: str | None, queue: str | None, where: tuple[str, ...], limit: int, cursor: str | None,
            as_json: bool, redis_url: str | None) -> None:
    from sidequest.api import Search

    if action not in ACTIONS:
        raise UserError(f"unknown search action {action!r}: use list (the default), retry, delete or kill")
    if not any((klass, jid, args, grep, error, queue)):
        raise UserError("say what to find: --class, --jid, --args, --grep, --error or --queue "
                        "(to act on a whole set: sidequest retries retry --all)")
    if action != "list" and cursor:
        raise UserError(f"`search {action}` acts on every match; --cursor is for reading pages")
    search = Search(name=klass, jid=jid, args=args, text=grep, error=error, queue=queue,
                    where=where or ("queue", "lane", "scheduled", "retry", "dead"), client=admin_client(redis_url))
    if action != "list":
        moved = {"retry": search.retry_all, "delete": search.delete_all, "kill": search.kill_all}[action]()
        _report(action, moved, as_json)
        return
    try:
        page = search.page(cursor, limit)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    _show(search, page, as_json)


def _report(action: str, moved: int, as_json: bool) -> None:
    from sidequest.cli.admin import render

    if as_json:
        render.emit_json({"action": action, "moved": moved})
    else:
        click.echo(f"{render.plural(moved, 'matching job')} {PAST[action]}")


def _show(search: Search, page: SearchPage, as_json: bool) -> None:
    from sidequest.cli.admin import render

    if as_json:
        render.emit_json({"hits": [hit.as_dict() for hit in page.hits], "cursor": page.cursor, "read": page.read})
        return
    out = render.console()
    if page.hits:
        grid = render.table("WHERE", "JID", "JOB", "QUEUE", "ARGS", "ERROR", title="Matches")
        for hit in page.hits:
            r = hit.record
            error = f"{r.error_class}: {r.error_message}" if r.error_class else ""
            render.row(grid, hit.where, r.jid or "-", r.display_class or "(not a job)", r.queue,
                       render.brief(r.display_args, 40), error[:40])
        out.print(grid)
    noun = render.plural(len(page.hits), "matching job")
    if page.cursor is None:
        out.print(f"{noun}; the search is complete")
    else:
        out.print(f"{noun} in this page ({page.read:,} entries read); next page: "
                  f"{shlex.join(['sidequest', 'search', *_flags(search), '--cursor', page.cursor])}")


def _flags(search: Search) -> list[str]:
    c = search.criteria
    found = [(flag, value) for flag, value in (("--class", c.name), ("--jid", c.jid), ("--args", c.args),
                                                ("--grep", c.text), ("--error", c.error), ("--queue", c.queue))
             if value]
    if len(search.where) < 5:
        found += [("--in", place) for place in search.where]
    return [part for pair in found for part in pair]
