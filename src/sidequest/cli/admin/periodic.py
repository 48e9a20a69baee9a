"""`sidequest periodic`: the periodic entries with their next and last run."""

from __future__ import annotations

import json

import click

from sidequest.cli.root import UserError, main
from sidequest.cli.worker import require
from sidequest.config import Config
from sidequest.errors import ConfigError, RedisUnavailableError


@main.command("periodic")
@click.option("-r", "--require", "requires", multiple=True, metavar="MODULE",
              help="Module that registers periodic entries; repeatable (running workers' entries show anyway).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per entry instead of a table.")
def periodic_command(requires: tuple[str, ...], as_json: bool) -> None:
    """List periodic entries with their next and last run (times in UTC)."""
    from sidequest.client.sync_client import Client
    from sidequest.features.periodic import format_table, status

    try:
        for module in requires:
            require(module)
        entries = status(Client(Config.from_env()))
    except ModuleNotFoundError as exc:
        raise UserError(f"cannot import required module: {exc}") from None
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    except RedisUnavailableError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        for entry in entries:
            click.echo(json.dumps(entry.as_dict()))
    else:
        click.echo(format_table(entries) if entries else "no periodic entries")
