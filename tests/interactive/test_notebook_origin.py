"""The notebook attacks of issue 18, replayed against served processes.

Gantry (config.asgi) and the notebook origin (interactive.origin) run under uvicorn,
each in a process of its own as `manage.py serve` starts them, over the test database;
the notebook is a real JupyterLab started with the local backend's flags. The ORM is
used only while no browser runs: Playwright's sync API runs an event loop in this thread.
"""

import contextlib
import json
import os
import signal
import threading
import time

import httpx
import pytest
from django.conf import settings

from accounts import services as account_services
from accounts.models import ApiToken
from jobs.services.submit import submit_job
from projects import services as project_services
from projects.models import ProjectRole
from tests.interactive.notebooks import Browser, gantry_session, jupyterlab, run_notebook, served
from tests.jobs.test_browser import chromium

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NOTEBOOK_TIMEOUT = 3.0


@pytest.fixture
def dana(make_user, owner, project):
    """A project maintainer: may exec in the owner's notebook (and so write its files)."""
    dana = make_user("dana")
    account_services.TENANT_MEMBERS.add(actor=owner, place=project.tenant, user=dana, role="member")
    project_services.add_project_member(
        actor=owner, project=project, user=dana, role=ProjectRole.MAINTAINER
    )
    return dana


def planted_notebook(gantry_url: str) -> dict:
    """The viewer's notebook from the issue: a cell marked trusted whose HTML output
    reads document.cookie and POSTs Gantry's token endpoint with the session."""
    script = (
        "window.__planted_ran = document.cookie;"
        f"fetch('{gantry_url}/api/v1/tokens/', {{method: 'POST', credentials: 'include',"
        " headers: {'Content-Type': 'application/json'}, body: JSON.stringify({name: 'pwned'})});"
        f"new Image().src = '{gantry_url}/leak?c=' + encodeURIComponent(document.cookie);"
    )
    html = f'<div id="planted">planted output</div><script>{script}</script>'
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "cells": [
            {
                "cell_type": "code",
                "id": "planted",
                "execution_count": 1,
                "metadata": {"trusted": True},
                "source": "from IPython.display import HTML\nHTML('...')",
                "outputs": [
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {"text/html": html, "text/plain": "<HTML object>"},
                    }
                ],
            }
        ],
    }


def test_a_trusted_notebook_runs_no_script_with_gantrys_origin(
    tmp_path, owner, member, dana, project
):
    job = submit_job(owner, project, kind="notebook", name="explore")
    with contextlib.ExitStack() as stack:
        gantry_url, origin_port = stack.enter_context(served(tmp_path))
        target, _ = stack.enter_context(jupyterlab(tmp_path / "nb", job.pk))
        run_notebook(job, target)
        lab = f"/jobs/{job.pk}/lab/"
        origin = f"http://{job.pk}.nb.localhost:{origin_port}"
        owners_gantry = gantry_session(gantry_url, owner)
        session_cookie = owners_gantry.cookies[settings.SESSION_COOKIE_NAME]
        body = {"type": "notebook", "format": "json", "content": planted_notebook(gantry_url)}

        # The viewer's way in is gone: no ticket, and no writes without one.
        viewer = Browser(origin_port, gantry_session(gantry_url, member), gantry_url)
        start = viewer.request("GET", job.pk, lab + "lab")
        assert start.status_code == 302
        assert viewer.gantry.get(start.headers["location"]).status_code == 403
        put = viewer.request(
            "PUT",
            job.pk,
            lab + "api/contents/results.ipynb",
            json=body,
            headers={"Origin": origin},
        )
        assert put.status_code == 403
        assert not (tmp_path / "nb" / "work" / "results.ipynb").exists()

        # Someone who may exec (a maintainer) plants it instead, through the origin.
        planter = Browser(origin_port, gantry_session(gantry_url, dana), gantry_url)
        assert planter.enter(job.pk).status_code == 200
        put = planter.unsafe("PUT", job.pk, lab + "api/contents/results.ipynb", json=body)
        assert put.status_code == 201, put.text
        saved = json.loads((tmp_path / "nb" / "work" / "results.ipynb").read_text())
        assert "trusted" not in saved["cells"][0]["metadata"]  # the pre-save hook dropped it
        served_back = planter.request("GET", job.pk, lab + "api/contents/results.ipynb").json()
        assert served_back["content"]["cells"][0]["metadata"]["trusted"] is False

        # The owner opens it in a browser, entering through the ticket.
        requests, responses = [], []
        with chromium() as browser:
            context = browser.new_context()
            context.add_cookies(
                [{"name": settings.SESSION_COOKIE_NAME, "value": session_cookie, "url": gantry_url}]
            )
            context.on("request", lambda r: requests.append((r.method, r.url)))
            context.on("response", lambda r: responses.append((r.request.method, r.url, r.status)))
            page = context.new_page()
            sockets = []
            page.on("websocket", lambda ws: sockets.append(ws))
            page.goto(f"{gantry_url}/jobs/{job.pk}/notebook/?path=lab/tree/results.ipynb")
            try:
                page.get_by_text("planted output").wait_for(timeout=120_000)
            except Exception as exc:
                page.screenshot(path=str(tmp_path / "notebook.png"))
                seen = "\n".join(f"{m} {u} {st}" for m, u, st in responses[-40:])
                raise AssertionError(f"at {page.url}; {tmp_path / 'notebook.png'}\n{seen}") from exc
            assert page.url.startswith(origin + lab), page.url
            # JupyterLab starts the notebook's kernel through the origin (its XSRF header).
            deadline = time.monotonic() + 120
            while not any(
                m == "POST" and u.split("?")[0].endswith(lab + "api/sessions")
                for m, u, _ in responses
            ):
                assert time.monotonic() < deadline, "JupyterLab started no kernel session: " + (
                    "\n".join(f"{m} {u} {st}" for m, u, st in responses if "/api/" in u)
                )
                page.wait_for_timeout(250)
            # ...and talks to it over the kernel's websocket, opened on the notebook origin.
            while not any("/channels" in ws.url and not ws.is_closed() for ws in sockets):
                assert time.monotonic() < deadline, [(ws.url, ws.is_closed()) for ws in sockets]
                page.wait_for_timeout(250)
            page.wait_for_timeout(1000)  # a script of the output would have run by now
            kernel_sockets = [ws.url for ws in sockets if "/channels" in ws.url]

            ran = page.evaluate("() => window.__planted_ran")
            cookies_seen = page.evaluate("() => document.cookie")
            gantry_calls = [(m, u) for m, u in requests if u.startswith(gantry_url)]
            # What a script that did run could try: Gantry's API with the owner's session.
            attempt = page.evaluate(
                """async (url) => {
                    try {
                        const r = await fetch(url + '/api/v1/tokens/', {method: 'POST',
                            credentials: 'include', headers: {'Content-Type': 'application/json'},
                            body: JSON.stringify({name: 'pwned'})});
                        return r.status;
                    } catch (e) { return 'refused: ' + e; }
                }""",
                gantry_url,
            )
            context.close()

        assert ran is None, "the planted output's script ran"
        assert "sessionid" not in cookies_seen and "csrftoken" not in cookies_seen, cookies_seen
        assert set(part.split("=")[0].strip() for part in cookies_seen.split(";")) == {"_xsrf"}
        # The browser only went to Gantry to get the ticket; nothing called its API.
        assert [u.split("?")[0] for _, u in gantry_calls] == [
            f"{gantry_url}/jobs/{job.pk}/notebook/"
        ] * 2, gantry_calls
        started = [
            status
            for m, u, status in responses
            if m == "POST" and u.split("?")[0].endswith(lab + "api/sessions")
        ]
        assert started == [201], started
        refused = [(m, u, status) for m, u, status in responses if status == 403]
        assert refused == [], refused
        assert attempt != 201, attempt
        assert all(url.startswith(f"ws://{job.pk}.nb.localhost:") for url in kernel_sockets)

        # The owner's session still works, and holds no token.
        tokens = owners_gantry.get("/api/v1/tokens/")
        assert tokens.status_code == 200
        rows = tokens.json()
        assert (rows["results"] if isinstance(rows, dict) else rows) == []
    assert not ApiToken.objects.filter(user=owner).exists()


def test_a_stopped_notebook_stalls_no_one_else(tmp_path, owner, member, project):
    job = submit_job(owner, project, kind="notebook", name="explore")
    with contextlib.ExitStack() as stack:
        gantry_url, origin_port = stack.enter_context(
            served(tmp_path, notebook_timeout=NOTEBOOK_TIMEOUT)
        )
        target, lab_process = stack.enter_context(jupyterlab(tmp_path / "nb", job.pk))
        run_notebook(job, target)
        status = f"/jobs/{job.pk}/lab/api/status"
        gantry = gantry_session(gantry_url, owner)
        owner_browser = Browser(origin_port, gantry, gantry_url)
        owner_browser.enter(job.pk)
        assert owner_browser.request("GET", job.pk, status).status_code == 200

        os.kill(lab_process.pid, signal.SIGSTOP)
        try:
            stalled = []

            def ask():
                browser = Browser(origin_port)
                browser.jars = {k: dict(v) for k, v in owner_browser.jars.items()}
                started = time.monotonic()
                answer = browser.request("GET", job.pk, status)
                stalled.append((answer.status_code, answer.text, time.monotonic() - started))

            askers = [threading.Thread(target=ask) for _ in range(2)]
            for asker in askers:
                asker.start()
            time.sleep(0.5)  # both are waiting on the stopped notebook now

            meanwhile = {}
            anonymous = httpx.Client(base_url=gantry_url, timeout=30)
            for name, call in [
                ("healthz", lambda: anonymous.get("/healthz")),
                ("sign-in page", lambda: anonymous.get("/accounts/login/")),
                ("job list API", lambda: gantry.get("/api/v1/jobs/")),
                ("project list", lambda: gantry.get("/projects/")),
                # The origin itself answers others while two requests wait on the notebook.
                ("origin, a viewer", lambda: Browser(origin_port).request("GET", job.pk, status)),
            ]:
                started = time.monotonic()
                meanwhile[name] = (call().status_code, time.monotonic() - started)
            for asker in askers:
                asker.join(60)
        finally:
            os.kill(lab_process.pid, signal.SIGCONT)

        durations = {name: f"{seconds:.2f} s" for name, (_, seconds) in meanwhile.items()}
        print(f"meanwhile {durations}; stalled {[(c, f'{s:.2f} s') for c, _, s in stalled]}")
        assert {name: code for name, (code, _) in meanwhile.items()} == {
            "healthz": 200,
            "sign-in page": 200,
            "job list API": 200,
            "project list": 200,
            "origin, a viewer": 403,
        }, durations
        assert [code for code, _, _ in stalled] == [504, 504], (stalled, durations)
        assert all(f"within {NOTEBOOK_TIMEOUT:g} seconds" in text for _, text, _ in stalled)
        # Resumed, the notebook answers again through the same session.
        assert owner_browser.request("GET", job.pk, status).status_code == 200, (
            f"stalled requests took {[f'{s:.1f} s' for _, _, s in stalled]}; meanwhile {durations}"
        )
