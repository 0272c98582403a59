"""The notebook origin and its proxy, against a real JupyterLab started for this module.

The origin (`interactive.origin`) runs under uvicorn in a thread of the test process,
over the test database; Gantry's side is the Django test client. Job 1 is a running
notebook served by the module's JupyterLab (its worker row points there).
"""

import json
import uuid
from urllib.parse import urlsplit

import httpx
import pytest
from django.test import Client

from interactive import proxy
from interactive.models import NotebookTicket
from jobs.services.submit import submit_job
from projects import services as project_services
from projects.models import ProjectRole
from tests.interactive.notebooks import (
    KERNEL_PROTOCOL,
    Browser,
    OriginServer,
    jupyterlab,
    run_notebook,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, reset_sequences=True)]

LAB = "/jobs/1/lab/"


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory):
    with jupyterlab(tmp_path_factory.mktemp("jupyter"), 1) as (target, _):
        yield target


@pytest.fixture(scope="module")
def origin_server():
    with OriginServer() as server:
        yield server


@pytest.fixture
def notebook(lab_server, origin_server, settings, owner, project):
    """Job 1: the owner's running notebook."""
    settings.GANTRY_NOTEBOOK_ORIGIN = origin_server.origin_template
    proxy._recorded.clear()
    job = submit_job(owner, project, kind="notebook", name="explore")
    assert job.pk == 1
    return run_notebook(job, lab_server)


@pytest.fixture
def dana(make_user, owner, project):
    """A project maintainer (a tenant member given the role in this project)."""
    from accounts import services as account_services

    dana = make_user("dana")
    account_services.TENANT_MEMBERS.add(actor=owner, place=project.tenant, user=dana, role="member")
    project_services.add_project_member(
        actor=owner, project=project, user=dana, role=ProjectRole.MAINTAINER
    )
    return dana


def to_gantry(location: str) -> str:
    """The path and query of an absolute URL on Gantry, for the test client."""
    parts = urlsplit(location)
    return f"{parts.path}?{parts.query}"


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def browser_for(origin_server):
    def make(user=None):
        return Browser(origin_server.port, signed_in(user) if user else None)

    return make


def assert_token_hidden(token, response):
    assert token not in response.text
    for name, value in response.headers.multi_items():
        assert token not in value, name


def kernel_ids(browser):
    return {kernel["id"] for kernel in browser.request("GET", 1, LAB + "api/kernels").json()}


# --- entering ---------------------------------------------------------------------


def test_owner_enters_with_a_ticket_and_gets_jupyterlab(notebook, browser_for, owner):
    browser = browser_for(owner)
    page = browser.enter(1)

    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "JupyterLab" in page.text
    assert f'"baseUrl": "{LAB}"' in page.text
    assert '"token": ""' in page.text  # JupyterLab's page config had it; the proxy took it out
    assert_token_hidden(notebook.worker_set.get().notebook_token, page)
    session = browser.jars[1][proxy.SESSION_COOKIE]
    assert proxy.read_session(session, 1).user == owner.pk
    assert proxy.STATE_COOKIE not in browser.jars[1]  # spent with the ticket
    cookie = next(c for c in page.headers.get_list("set-cookie") if c.startswith("_xsrf="))
    assert "Path=/" in cookie and "HttpOnly" not in cookie  # JupyterLab reads it


def test_the_session_cookie_is_host_only_httponly_and_lax(notebook, browser_for, owner):
    browser = browser_for(owner)
    entered = browser.redeem(1, browser.ticket_for(1))
    cookie = next(
        c for c in entered.headers.get_list("set-cookie") if c.startswith(proxy.SESSION_COOKIE)
    )
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "samesite", "path"} <= attributes
    assert "domain" not in attributes  # host-only: this job's host and no other
    assert "SameSite=Lax" in cookie
    assert entered.headers["referrer-policy"] == "no-referrer"


def test_gantry_sends_a_signed_out_user_to_sign_in(notebook):
    answer = Client().get("/jobs/1/notebook/?state=" + "s" * 43)
    assert answer.status_code == 302 and "/accounts/login/" in answer["Location"]


def test_gantry_without_state_sends_the_browser_to_the_origin_first(notebook, owner):
    answer = signed_in(owner).get("/jobs/1/notebook/?path=lab/tree/a.ipynb")
    assert answer.status_code == 302
    assert answer["Location"] == proxy.lab_url(1, "lab/tree/a.ipynb")


def test_gantry_no_longer_serves_notebooks_on_its_own_origin(notebook, owner):
    assert signed_in(owner).get(LAB + "lab").status_code == 404


def test_a_job_without_a_running_notebook_has_no_ticket(notebook, owner, project):
    train = submit_job(owner, project, name="train", command="python -c pass")
    answer = signed_in(owner).get(f"/jobs/{train.pk}/notebook/?state=" + "s" * 43)
    assert answer.status_code == 404


def test_unknown_hosts_and_paths_are_not_found(notebook, origin_server):
    http = httpx.Client(base_url=f"http://127.0.0.1:{origin_server.port}")
    assert http.get("/jobs/1/lab/lab", headers={"Host": "127.0.0.1"}).status_code == 404
    assert http.get("/jobs/1/lab/lab", headers={"Host": "x.nb.localhost"}).status_code == 404
    browser = Browser(origin_server.port)
    assert browser.request("GET", 1, "/jobs/2/lab/lab").status_code == 404  # not this host's job
    assert browser.request("GET", 1, "/elsewhere").status_code == 404


# --- tickets ---------------------------------------------------------------------------


def test_a_ticket_opens_once(notebook, browser_for, owner):
    browser = browser_for(owner)
    ticket = browser.ticket_for(1)
    state = browser.jars[1][proxy.STATE_COOKIE]
    assert browser.redeem(1, ticket).status_code == 302
    # Replayed with everything the first redemption had: the same state cookie.
    browser.jars[1] = {proxy.STATE_COOKIE: state}
    again = browser.redeem(1, ticket)
    assert again.status_code == 403
    assert "used already" in again.text
    assert proxy.SESSION_COOKIE not in browser.jars[1]
    assert NotebookTicket.objects.count() == 1


def test_an_expired_ticket_opens_nothing(notebook, browser_for, owner, monkeypatch):
    browser = browser_for(owner)
    ticket = browser.ticket_for(1)
    monkeypatch.setattr(proxy, "TICKET_SECONDS", -1)  # as if a minute had passed
    refused = browser.redeem(1, ticket)
    assert refused.status_code == 403 and "expired" in refused.text
    assert proxy.SESSION_COOKIE not in browser.jars[1]


def test_a_ticket_for_one_job_does_not_open_another(
    notebook, browser_for, owner, project, tmp_path
):
    other = submit_job(owner, project, kind="notebook", name="b")
    socket = str(tmp_path / ".notebook.sock")
    run_notebook(other, proxy.NotebookTarget("localhost", 0, "t", "/jobs/2/lab/", uds=socket))
    browser = browser_for(owner)
    ticket = browser.ticket_for(1)
    browser.jars[other.pk] = dict(browser.jars[1])  # even with the right state cookie there
    refused = browser.redeem(other.pk, ticket)
    assert refused.status_code == 403 and "another notebook" in refused.text
    assert proxy.SESSION_COOKIE not in browser.jars[other.pk]


def test_another_browser_cannot_redeem_a_ticket(notebook, browser_for, owner, dana):
    # A second user with exec rights, in a browser of their own (their own state cookie).
    owners = browser_for(owner)
    ticket = owners.ticket_for(1)
    danas = browser_for(dana)
    danas.ticket_for(1)  # dana's browser holds a state cookie of its own
    refused = danas.redeem(1, ticket)
    assert refused.status_code == 403 and "another browser" in refused.text
    assert proxy.SESSION_COOKIE not in danas.jars[1]
    # Nor with no state cookie at all (a link sent to someone).
    stranger = Browser(owners.port)
    assert stranger.redeem(1, ticket).status_code == 403
    # The owner's own browser still can: the refusals did not spend it.
    assert owners.redeem(1, ticket).status_code == 302


def test_a_forged_or_tampered_ticket_opens_nothing(notebook, browser_for, owner, member):
    browser = browser_for(owner)
    ticket = browser.ticket_for(1)
    payload, rest = ticket.split(":", 1)
    assert browser.redeem(1, "x" + ticket).status_code == 403
    assert browser.redeem(1, payload[:-2] + "AA:" + rest).status_code == 403
    assert browser.redeem(1, "").status_code == 403


def test_a_viewer_gets_no_ticket(notebook, browser_for, member):
    viewer = browser_for(member)
    start = viewer.request("GET", 1, LAB + "lab")
    assert start.status_code == 302
    assert viewer.gantry.get(to_gantry(start.headers["location"])).status_code == 403


def test_an_outsider_gets_404_at_gantry(notebook, outsider):
    assert signed_in(outsider).get("/jobs/1/notebook/?state=" + "s" * 43).status_code == 404


# --- what a viewer (no job.exec) gets at the origin -------------------------------------


def test_viewer_is_refused_kernels_terminals_and_contents(notebook, browser_for, member):
    viewer = browser_for(member)
    viewer.request("GET", 1, LAB + "lab")  # holds a state cookie, never a session
    for method, path in [
        ("GET", "api/kernels"),
        ("POST", "api/kernels"),
        ("GET", "api/terminals"),
        ("POST", "api/terminals"),
        ("GET", "api/contents"),
        ("PUT", "api/contents/results.ipynb"),
    ]:
        answer = viewer.request(
            method,
            1,
            LAB + path,
            headers={"Origin": viewer.origin(1)},
            **({"json": {"type": "notebook"}} if method != "GET" else {}),
        )
        assert answer.status_code == 403, (method, path, answer.status_code)


def test_viewer_cannot_open_a_kernel_or_terminal_socket(notebook, browser_for, member):
    from websockets.exceptions import InvalidStatus

    viewer = browser_for(member)
    viewer.request("GET", 1, LAB + "lab")
    for path in (
        "api/kernels/00000000-0000-0000-0000-000000000000/channels",
        "terminals/websocket/1",
    ):
        with pytest.raises(InvalidStatus) as refused:
            viewer.websocket(1, LAB + path)
        assert refused.value.response.status_code == 403


def test_a_submitter_may_exec_until_demoted_to_viewer(
    notebook, browser_for, make_user, owner, project
):
    from websockets.exceptions import ConnectionClosed

    from accounts import services as account_services

    dev = make_user("devi")
    account_services.TENANT_MEMBERS.add(actor=owner, place=project.tenant, user=dev, role="member")
    developer = project_services.add_project_member(
        actor=owner, project=project, user=dev, role=ProjectRole.DEVELOPER
    )
    type(notebook).objects.filter(pk=1).update(created_by=dev)  # dev's own notebook
    browser = browser_for(dev)
    assert browser.enter(1).status_code == 200
    assert browser.request("GET", 1, LAB + "api/kernels").status_code == 200

    project_services.PROJECT_MEMBERS.change_role(
        actor=owner, member=developer, role=ProjectRole.VIEWER
    )

    assert browser.request("GET", 1, LAB + "api/kernels").status_code == 403
    # Accepted, then closed with 4403 by the consumer's access check.
    with (
        browser.websocket(1, LAB + "api/events/subscribe") as ws,
        pytest.raises(ConnectionClosed) as closed,
    ):
        ws.recv(timeout=10)
    assert closed.value.rcvd.code == 4403


def test_a_developer_may_not_exec_in_someone_elses_notebook(notebook, make_user, owner, project):
    from accounts import services as account_services

    dev = make_user("devi")
    account_services.TENANT_MEMBERS.add(actor=owner, place=project.tenant, user=dev, role="member")
    project_services.add_project_member(
        actor=owner, project=project, user=dev, role=ProjectRole.DEVELOPER
    )
    assert signed_in(dev).get("/jobs/1/notebook/?state=" + "s" * 43).status_code == 403


# --- the proxy itself -------------------------------------------------------------------


def test_member_can_call_the_rest_api(notebook, browser_for, owner):
    browser = browser_for(owner)
    browser.enter(1)
    response = browser.request("GET", 1, LAB + "api/contents")
    assert response.status_code == 200
    assert response.json()["type"] == "directory"
    assert_token_hidden(notebook.worker_set.get().notebook_token, response)


def test_static_files_come_through_whole(notebook, browser_for, owner):
    browser = browser_for(owner)
    page = browser.enter(1)
    script = page.text.split('src="', 1)[1].split('"', 1)[0]  # the bundle loader
    response = browser.request("GET", 1, script)
    assert response.status_code == 200
    assert response.content.startswith(b"/*") or b"webpack" in response.content[:5000]

    # Binary files are relayed byte for byte, with their length.
    response = browser.request("GET", 1, LAB + "static/favicons/favicon.ico")
    assert response.status_code == 200
    assert int(response.headers["content-length"]) == len(response.content) > 0


def test_jupyter_redirects_stay_on_the_origin(notebook, browser_for, owner):
    browser = browser_for(owner)
    browser.enter(1)
    response = browser.request("GET", 1, LAB)
    assert response.status_code == 302
    assert response.headers["location"].rstrip("?") == LAB + "lab"


def test_use_is_recorded_for_the_idle_stop(notebook, browser_for, owner):
    browser = browser_for(owner)
    browser.enter(1)
    notebook.refresh_from_db()
    assert notebook.last_activity_at is not None


def test_post_without_xsrf_token_is_refused(notebook, browser_for, owner):
    browser = browser_for(owner)
    browser.enter(1)
    before = kernel_ids(browser)
    response = browser.request(
        "POST",
        1,
        LAB + "api/kernels",
        json={"name": "python3"},
        headers={"Origin": browser.origin(1)},
    )
    assert response.status_code == 403
    wrong = browser.unsafe(
        "POST", 1, LAB + "api/kernels", json={"name": "python3"}, headers={"X-XSRFToken": "x" * 32}
    )
    assert wrong.status_code == 403
    assert kernel_ids(browser) == before


def test_cross_origin_post_is_refused_even_with_the_token(notebook, browser_for, owner):
    browser = browser_for(owner)
    browser.enter(1)
    before = kernel_ids(browser)
    for origin in ("https://evil.example", browser.origin(2), None):
        headers = {"Origin": origin} if origin else {}
        response = browser.request(
            "POST",
            1,
            LAB + "api/kernels",
            json={"name": "python3"},
            headers={**headers, "X-XSRFToken": browser.jars[1]["_xsrf"]},
        )
        assert response.status_code == 403, origin
    assert kernel_ids(browser) == before


def test_notebook_not_listening_yet_answers_503_and_reloads(notebook, browser_for, owner, tmp_path):
    browser = browser_for(owner)
    browser.enter(1)
    notebook.worker_set.update(workdir=str(tmp_path))  # no socket there (yet)
    response = browser.request("GET", 1, LAB + "api/status")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "2" and response.headers["refresh"] == "2"
    assert "Notebook starting" in response.text and "/jobs/1/" in response.text


def test_upstream_cookies_are_not_set_on_the_origin(notebook, browser_for, owner):
    browser = browser_for(owner)
    page = browser.enter(1)
    names = {c.split("=", 1)[0] for c in page.headers.get_list("set-cookie")}
    assert names == {"_xsrf"}  # ours; Jupyter's own Set-Cookie headers were dropped


# --- websockets ------------------------------------------------------------------------


def execute_request(code, session):
    msg_id = uuid.uuid4().hex
    header = {
        "msg_id": msg_id,
        "msg_type": "execute_request",
        "username": "test",
        "session": session,
        "date": "2026-01-01T00:00:00Z",
        "version": "5.3",
    }
    content = {
        "code": code,
        "silent": False,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": True,
    }
    return msg_id, {
        "header": header,
        "parent_header": {},
        "metadata": {},
        "content": content,
        "buffers": [],
        "channel": "shell",
    }


def execute_result(ws, msg_id, decode):
    while True:
        message = decode(ws.recv(timeout=60))
        if (
            message["parent_header"].get("msg_id") == msg_id
            and message["header"]["msg_type"] == "execute_result"
        ):
            return message["content"]["data"]["text/plain"]


def test_kernel_runs_code_through_the_origin(notebook, browser_for, owner):
    from jupyter_server.services.kernels.connection.base import (
        deserialize_msg_from_ws_v1,
        serialize_msg_to_ws_v1,
    )

    browser = browser_for(owner)
    browser.enter(1)
    response = browser.unsafe("POST", 1, LAB + "api/kernels", json={"name": "python3"})
    assert response.status_code == 201, response.text
    assert_token_hidden(notebook.worker_set.get().notebook_token, response)
    kernel = response.json()["id"]
    session = uuid.uuid4().hex
    channels = f"{LAB}api/kernels/{kernel}/channels?session_id={session}"
    try:
        # JupyterLab's protocol: binary frames, negotiated with a subprotocol.
        with browser.websocket(1, channels, subprotocols=[KERNEL_PROTOCOL]) as ws:
            assert ws.subprotocol == KERNEL_PROTOCOL
            msg_id, message = execute_request("1+1", session)
            parts = [
                json.dumps(message[p]).encode()
                for p in ("header", "parent_header", "metadata", "content")
            ]
            ws.send(serialize_msg_to_ws_v1(parts, "shell"))

            def decode(frame):
                _, parts = deserialize_msg_from_ws_v1(frame)
                header, parent, _, content = (json.loads(part) for part in parts[:4])
                return {"header": header, "parent_header": parent, "content": content}

            assert execute_result(ws, msg_id, decode) == "2"
        # Without a subprotocol Jupyter speaks JSON in text frames.
        with browser.websocket(1, channels) as ws:
            msg_id, message = execute_request("6*7", session)
            ws.send(json.dumps(message))
            assert execute_result(ws, msg_id, json.loads) == "42"
    finally:
        assert browser.unsafe("DELETE", 1, f"{LAB}api/kernels/{kernel}").status_code == 204


def test_websocket_from_another_origin_is_refused(notebook, browser_for, owner):
    from websockets.exceptions import InvalidStatus

    browser = browser_for(owner)
    browser.enter(1)
    with browser.websocket(1, LAB + "api/events/subscribe"):
        pass  # the notebook's own page may
    for origin in ("https://evil.example", browser.origin(2)):
        with pytest.raises(InvalidStatus) as refused:
            browser.websocket(1, LAB + "api/events/subscribe", origin=origin)
        assert refused.value.response.status_code == 403


def test_a_user_who_loses_access_loses_the_open_kernel_socket(
    notebook, browser_for, owner, dana, project, settings
):
    """Access is asked again between frames: once it is gone, the next frame the user
    sends never reaches the kernel, and the socket closes with 4403."""
    from websockets.exceptions import ConnectionClosed

    settings.GANTRY_WS_RECHECK_SECONDS = 0
    browser = browser_for(dana)
    browser.enter(1)
    kernel = browser.unsafe("POST", 1, LAB + "api/kernels", json={"name": "python3"}).json()["id"]
    session = uuid.uuid4().hex
    channels = f"{LAB}api/kernels/{kernel}/channels?session_id={session}"
    try:
        with browser.websocket(1, channels) as ws:
            msg_id, message = execute_request("6*7", session)
            ws.send(json.dumps(message))
            assert execute_result(ws, msg_id, json.loads) == "42"
            project_services.PROJECT_MEMBERS.remove(
                actor=owner, member=project.members.get(user=dana)
            )
            msg_id, message = execute_request("open('/tmp/x', 'w')", session)
            ws.send(json.dumps(message))
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    frame = json.loads(ws.recv(timeout=30))
                    # Only what the kernel said before access was taken away may arrive.
                    assert frame["parent_header"].get("msg_id") != msg_id
            assert closed.value.rcvd.code == 4403
    finally:
        owners = browser_for(owner)
        owners.enter(1)
        assert owners.unsafe("DELETE", 1, f"{LAB}api/kernels/{kernel}").status_code == 204


# --- pieces ----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 3, 7, 100])
def test_token_is_removed_across_chunk_borders(size):
    from asgiref.sync import async_to_sync

    secret = b"s3cr3t-token"
    text = b'{"token": "s3cr3t-token", "x": "s3cr3t-tokens3cr3t-token!"}'

    async def scrub():
        async def chunks():
            for start in range(0, len(text), size):
                yield text[start : start + size]

        return b"".join([chunk async for chunk in proxy.without(chunks(), secret)])

    assert async_to_sync(scrub)() == b'{"token": "", "x": "!"}'


def test_origin_cookies_and_credentials_stay_home():
    headers = proxy.upstream_headers(
        [
            ("Cookie", f"{proxy.SESSION_COOKIE}=s; {proxy.STATE_COOKIE}=t; _xsrf=x; app=1"),
            ("Authorization", "Token gantry-api-token"),
            ("X-XSRFToken", "x"),
            ("Origin", "http://1.nb.localhost:8001"),
            ("Connection", "keep-alive, X-Private"),
            ("X-Private", "hop"),
            ("Accept", "application/json"),
            ("Host", "1.nb.localhost:8001"),
        ],
        "jupyter-token",
    )
    headers = {name.lower(): value for name, value in headers.items()}
    assert headers["cookie"] == "app=1"
    assert headers["authorization"] == "token jupyter-token"
    assert headers["accept"] == "application/json"
    for name in ("x-xsrftoken", "origin", "connection", "x-private", "host"):
        assert name not in headers


@pytest.mark.parametrize(
    "template,host,job",
    [
        ("http://{job}.nb.localhost:8001", "7.nb.localhost:8001", 7),
        ("http://{job}.nb.localhost:8001", "7.NB.localhost:8001", 7),
        ("http://{job}.nb.localhost:8001", "7.nb.localhost:8002", None),
        ("http://{job}.nb.localhost:8001", "7.nb.localhost", None),
        ("http://{job}.nb.localhost:8001", "x7.nb.localhost:8001", None),
        ("http://{job}.nb.localhost:8001", "07.nb.localhost:8001", None),
        ("http://{job}.nb.localhost:8001", "1.7.nb.localhost:8001", None),
        ("https://{job}.nb.lab.example", "12.nb.lab.example", 12),
        ("https://{job}.nb.lab.example", "12.nb.lab.example:443", 12),
        ("https://{job}.nb.lab.example", "12.nb.lab.example.evil", None),
        ("https://{job}.nb.lab.example", "nb.lab.example", None),
    ],
)
def test_job_of_host(settings, template, host, job):
    settings.GANTRY_NOTEBOOK_ORIGIN = template
    assert proxy.job_of_host(host) == job


@pytest.mark.parametrize(
    "path,clean",
    [
        ("lab/tree/a.ipynb", "lab/tree/a.ipynb"),
        ("lab", "lab"),
        ("/evil", ""),
        ("//evil.example/x", ""),
        ("lab/../../x", ""),
        ("lab\\x", ""),
        ("lab\nx", ""),
    ],
)
def test_only_plain_lab_paths_are_kept(path, clean):
    assert proxy.clean_path(path) == clean


def test_the_job_page_offers_jupyterlab_to_who_may_exec(notebook, owner, member):
    link = 'href="/jobs/1/notebook/"'
    assert link in signed_in(owner).get("/jobs/1/").content.decode()
    assert link not in signed_in(member).get("/jobs/1/").content.decode()


def test_a_busy_user_waits_for_a_slot_and_then_gets_503_without_holding_up_others():
    from asgiref.sync import async_to_sync

    from interactive.origin import Busy, Slots

    async def go():
        slots, outcomes = Slots(), []
        async with slots.hold(("user", 1), 1, wait=5):
            try:
                async with slots.hold(("user", 1), 1, wait=0.2):
                    outcomes.append("second request of user 1 got in")
            except Busy:
                outcomes.append("second request of user 1: busy")
            async with slots.hold(("user", 2), 1, wait=0.2):
                outcomes.append("user 2 got in")
        async with slots.hold(("user", 1), 1, wait=0.2):
            outcomes.append("user 1 again, once the first is done")
        return outcomes, slots._held

    outcomes, left = async_to_sync(go)()
    assert outcomes == [
        "second request of user 1: busy",
        "user 2 got in",
        "user 1 again, once the first is done",
    ]
    assert left == {}  # nothing kept for users with nothing in flight


@pytest.mark.parametrize(
    "value",
    [
        "ftp://{job}.nb.example",
        "https://nb.example",
        "https://nb.{job}.example",
        "https://{job}.nb.example/lab",
        "https://{job}.{job}.nb.example",
        "https://{job}.nb.{x}.example",
    ],
)
def test_a_malformed_notebook_origin_stops_start_up_with_its_name(value):
    import os
    import subprocess
    import sys

    from django.conf import settings as django_settings

    env = {
        **os.environ,
        "GANTRY_NOTEBOOK_ORIGIN": value,
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    run = subprocess.run(
        [sys.executable, "-c", "import config.settings"],
        cwd=django_settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0
    assert "Configuration error in GANTRY_NOTEBOOK_ORIGIN" in run.stderr, run.stderr[-500:]


def test_a_cookie_domain_over_the_notebook_origins_is_a_system_error(settings):
    settings.GANTRY_NOTEBOOK_ORIGIN = "https://{job}.nb.lab.example"
    settings.SESSION_COOKIE_DOMAIN = ".lab.example"
    assert [e.id for e in proxy.check_notebook_origin()] == ["jobs.E010"]
    settings.SESSION_COOKIE_DOMAIN = "gantry.lab.example"
    assert proxy.check_notebook_origin() == []


def test_over_https_the_cookies_are_secure_and_host_prefixed(settings):
    from interactive.origin import _cookie

    settings.GANTRY_NOTEBOOK_ORIGIN = "https://{job}.nb.lab.example"
    name, value = _cookie(proxy.SESSION_COOKIE, "v", 60)
    cookie = value.decode()
    assert name == b"set-cookie"
    # __Host-: the browser keeps it only if Secure, Path=/ and without Domain, so no
    # sibling notebook host can set or overwrite it.
    assert cookie.startswith("__Host-gantry_nb=v;")
    assert "; Secure" in cookie and "; Path=/" in cookie and "Domain" not in cookie
    assert "; HttpOnly" in cookie and "; SameSite=Lax" in cookie
    assert _cookie(proxy.XSRF_COOKIE, "x", 60)[1].decode().startswith("_xsrf=x;")
