"""A Flask app whose view enqueues a welcome mail, sent by a job that runs in the app's context.

    export REDIS_URL=redis://localhost:6379/0
    flask --app examples/flask_app.py run                 # the web app
    sidequest worker -r examples/flask_app.py             # a worker: it imports the app too
    curl -X POST localhost:5000/signups/ada@example.com
    curl localhost:5000/outbox

Settings live in `app.config`, filled from `FLASK_*` environment variables as Flask does
(`FLASK_WELCOME_FROM=team@example.org`, `FLASK_SIDEQUEST_QUEUES='["mail"]'`); the job reads
them through `current_app`. The "mail server" is a Redis list, so the example needs nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flask import Blueprint, Flask, current_app

import sidequest
from sidequest.contrib.flask import Sidequest

OUTBOX = "examples:flask:outbox"  # where send_welcome "sends" its mail

sq = Sidequest()
views = Blueprint("signups", __name__)


@sidequest.job(name="examples.flask_app.send_welcome", retry=5)
def send_welcome(address: str) -> None:
    mail = {"from": current_app.config["WELCOME_FROM"], "to": address, "subject": "Welcome!"}
    sidequest.redis().rpush(OUTBOX, json.dumps(mail))


@views.post("/signups/<address>")
def sign_up(address: str) -> tuple[dict[str, Any], int]:
    return {"jid": send_welcome.perform_async(address)}, 202


@views.get("/outbox")
def outbox() -> list[Any]:
    return [json.loads(mail) for mail in sidequest.redis().lrange(OUTBOX, 0, -1)]


def create_app(settings: Mapping[str, Any] | None = None) -> Flask:
    app = Flask(__name__)
    app.config["WELCOME_FROM"] = "hello@example.com"
    app.config.from_prefixed_env()  # FLASK_WELCOME_FROM, FLASK_SIDEQUEST_REDIS_URL, ...
    app.config.update(settings or {})
    sq.init_app(app)  # reads SIDEQUEST_* from app.config: do it once the config is complete
    app.register_blueprint(views)
    return app


app = create_app()  # what `flask --app` serves, and what `sidequest worker -r` runs jobs in
