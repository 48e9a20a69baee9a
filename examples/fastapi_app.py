"""A FastAPI app that counts words in a background job, with the worker in the same process.

    REDIS_URL=redis://localhost:6379/0 uvicorn --app-dir examples fastapi_app:app
    curl -X POST localhost:8000/word-counts -H 'content-type: application/json' -d '{"text": "to be or not to be"}'

`POST /word-counts` pushes a job and awaits its return value; `GET /health` shows the worker.
Stop uvicorn (Ctrl-C, or TERM) and the worker stops with it: a job still running after
`SIDEQUEST_TIMEOUT` seconds goes back to its queue, for the next worker to run.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

import sidequest
from sidequest.contrib.fastapi import lifespan


@sidequest.job(name="examples.fastapi_app.count_words", result_ttl=300)
def count_words(text: str) -> dict[str, int]:
    return dict(Counter(text.lower().split()))


@asynccontextmanager
async def own_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The app's own start-up and shut-down: the worker runs only while this is up."""
    app.state.started_at = time.time()
    yield


app = FastAPI(lifespan=lifespan(worker=True, inner=own_lifespan))


class Text(BaseModel):
    text: str


@app.post("/word-counts")
async def word_counts(body: Text) -> dict[str, Any]:
    jid = await count_words.aio.perform_async(body.text)
    if jid is None:  # a client middleware of yours stopped the push
        raise HTTPException(409, "not enqueued")
    return {"jid": jid, "counts": await sidequest.aio.result(jid, timeout=30)}


@app.get("/health")
async def health(request: Request) -> dict[str, Any]:
    worker = request.app.state.sidequest_worker
    return {"worker": worker.identity if worker else None, "up_since": request.app.state.started_at}
