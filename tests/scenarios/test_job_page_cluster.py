"""The job page on a real 3-primary Redis Cluster: a job is found from its jid alone whichever
queue's slot holds it (queued, scheduled, retry, dead), and its set's actions, posted from the
page, move it within that slot and come back to the page. No primary answers CROSSSLOT (the
`client` fixture checks). The cluster and its fixtures are tests/scenarios/test_cluster_admin.py's.
"""

from __future__ import annotations

from starlette.testclient import TestClient

from scenarios.test_cluster_admin import client, cluster, spread  # noqa: F401  (fixtures)
from sidequest.api import DeadSet, RetrySet
from sidequest.jobs.payload import new_jid
from sidequest.web import create_app
from sidequest.web.security import COOKIE


def test_the_job_page_finds_a_job_in_any_slot_and_acts_there(client, spread):  # noqa: F811
    http = TestClient(create_app(client), headers={"Accept": "text/html"})
    for state, jids in (("queued", spread["queued"][::17]), ("scheduled", spread["scheduled"][::13]),
                        ("retry", spread["retry"][::7]), ("dead", spread["dead"])):
        for jid in jids:
            page = http.get(f"/jobs/{jid}")
            assert page.status_code == 200 and f"data-job-state>{state}<" in page.text, (state, jid)
    assert http.get(f"/jobs/{new_jid()}").status_code == 404
    entry = RetrySet(client).find_job(spread["retry"][3])
    linked = http.get(f"/jobs/{entry.jid}?in=retries&key={entry.key}")
    assert linked.status_code == 200 and f'name="key" value="{entry.key}"' in linked.text
    token = http.cookies[COOKIE]
    killed = http.post("/retries/actions", data={"csrf": token, "do": "kill", "key": entry.key, "job": entry.jid},
                       follow_redirects=False)
    assert killed.status_code == 303 and killed.headers["location"] == f"/jobs/{entry.jid}"
    dead = DeadSet(client).find_job(entry.jid)
    assert dead is not None and dead.set_key == client.keys.dead(entry.home)
    assert "data-job-state>dead<" in http.get(f"/jobs/{entry.jid}").text
