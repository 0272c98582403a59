"""The notebook proxy, against a real JupyterLab started for this module.

The jobs side (which job runs which notebook, who may view it) is replaced by
two functions patched into `jobs.proxy`: owner may view job 1, outsider may not.
"""

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace

import httpx
import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.http import Http404
from django.shortcuts import resolve_url
from django.test import AsyncClient, RequestFactory
from django.urls import include, path

from jobs import proxy

# The proxy's routes are not in config/urls.py yet: this module is the URLconf.
urlpatterns = [path("", include("jobs.proxy_urls")), path("", include("config.urls"))]

LAB = "/jobs/1/lab/"
KERNEL_PROTOCOL = "v1.kernel.websocket.jupyter.org"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """A JupyterLab as Gantry starts one: loopback only, a random token, the job's base URL."""
    home = tmp_path_factory.mktemp("jupyter")
    root = home / "work"
    root.mkdir()
    port, token = free_port(), secrets.token_hex(24)
    env = {
        **os.environ,
        "HOME": str(home),
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "IPYTHONDIR": str(home / "ipython"),
    }
    env.pop("JUPYTER_TOKEN", None)
    log = (home / "jupyterlab.log").open("wb")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",  # ServerApp.token before jupyter_server 2
            f"--ServerApp.base_url={LAB}",
            f"--ServerApp.root_dir={root}",
            # CI runs as root; Jupyter refuses that unless told.
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    status_url = f"http://127.0.0.1:{port}{LAB}api/status"
    deadline = time.monotonic() + 60
    try:
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited: {(home / 'jupyterlab.log').read_text()[-3000:]}")
            try:
                answer = httpx.get(
                    status_url, headers={"Authorization": f"token {token}"}, timeout=2
                )
                if answer.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("JupyterLab did not answer within 60 s")
            time.sleep(0.25)
        yield proxy.NotebookTarget("127.0.0.1", port, token, LAB)
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture
def activity(monkeypatch):
    """The jobs whose use the proxy recorded, in order."""
    recorded = []
    monkeypatch.setattr(proxy, "record_activity", lambda job: recorded.append(job.pk))
    monkeypatch.setattr(proxy, "_recorded", {})
    return recorded


@pytest.fixture
def notebook(monkeypatch, jupyterlab, owner, activity):
    """Job 1 runs `jupyterlab`; only `owner` may view it."""

    def get_job_for_user(user, pk):
        if pk != 1 or user.pk != owner.pk:
            raise Http404
        return SimpleNamespace(pk=pk)

    monkeypatch.setattr(proxy, "get_job_for_user", get_job_for_user)
    monkeypatch.setattr(proxy, "resolve_target", lambda job: jupyterlab)
    return jupyterlab


def fetch(client, method, url, **extra):
    """One request through the ASGI stack; returns (response, body bytes)."""

    async def go():
        response = await getattr(client, method)(url, **extra)
        if response.streaming:
            body = b"".join([chunk async for chunk in response.streaming_content])
        else:
            body = response.content
        return response, body

    return async_to_sync(go)()


def assert_token_hidden(token, response, body):
    assert token not in body.decode("utf-8", "replace")
    for name, value in response.items():
        assert token not in value, name
    for morsel in response.cookies.values():
        assert token not in morsel.OutputString()


def logged_in(user, **kwargs):
    client = AsyncClient(**kwargs)
    client.force_login(user)
    return client


def xsrf_headers(client):
    """What JupyterLab's frontend sends: the `_xsrf` cookie's value as X-XSRFToken."""
    fetch(client, "get", LAB + "lab")
    return {"headers": {"X-XSRFToken": client.cookies["_xsrf"].value}}


def kernel_ids(client):
    _, body = fetch(client, "get", LAB + "api/kernels")
    return {kernel["id"] for kernel in json.loads(body)}


pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.urls(__name__),
]


def test_member_gets_the_jupyterlab_page(notebook, owner):
    client = logged_in(owner)

    response, body = fetch(client, "get", LAB)
    assert response.status_code == 302
    assert response["Location"].rstrip("?") == LAB + "lab"
    assert_token_hidden(notebook.token, response, body)

    response, body = fetch(client, "get", LAB + "lab")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    page = body.decode()
    assert "JupyterLab" in page
    assert f'"baseUrl": "{LAB}"' in page
    assert '"token": ""' in page  # JupyterLab's page config had it; the proxy took it out
    assert_token_hidden(notebook.token, response, body)
    assert response.cookies["_xsrf"]["path"] == LAB


def test_member_can_call_the_rest_api(notebook, owner):
    response, body = fetch(logged_in(owner), "get", LAB + "api/contents")
    assert response.status_code == 200
    assert json.loads(body)["type"] == "directory"
    assert_token_hidden(notebook.token, response, body)


def test_static_files_come_through_whole(notebook, owner):
    client = logged_in(owner)
    _, page = fetch(client, "get", LAB + "lab")
    script = page.decode().split('src="', 1)[1].split('"', 1)[0]  # the bundle loader
    response, body = fetch(client, "get", script)
    assert response.status_code == 200
    assert body.startswith(b"/*") or b"webpack" in body[:5000]
    assert_token_hidden(notebook.token, response, body)

    # Binary files are relayed byte for byte, with their length.
    response, body = fetch(client, "get", LAB + "static/favicons/favicon.ico")
    assert response.status_code == 200
    assert int(response["Content-Length"]) == len(body) > 0


def test_outsider_gets_404(notebook, outsider):
    response, body = fetch(logged_in(outsider), "get", LAB + "lab")
    assert response.status_code == 404
    assert_token_hidden(notebook.token, response, body)


def test_use_is_recorded_for_the_idle_stop_at_most_every_30_seconds(notebook, owner, activity):
    client = logged_in(owner)
    fetch(client, "get", LAB + "api/status")
    fetch(client, "get", LAB + "api/status")
    assert activity == [1]

    proxy._recorded[1] -= proxy.RECORD_EVERY
    fetch(client, "get", LAB + "api/status")
    assert activity == [1, 1]


def test_outsiders_leave_no_activity(notebook, outsider, activity):
    fetch(logged_in(outsider), "get", LAB + "api/status")
    assert activity == []


def test_anonymous_is_sent_to_login(notebook):
    response, _ = fetch(AsyncClient(), "get", LAB + "lab")
    assert response.status_code == 302
    assert response["Location"] == f"{resolve_url(settings.LOGIN_URL)}?next=/jobs/1/lab/lab"


def test_post_without_csrf_token_is_refused(notebook, owner):
    client = logged_in(owner, enforce_csrf_checks=True)
    before = kernel_ids(client)
    fetch(client, "get", LAB + "lab")  # the browser has both cookies: still not enough

    response, _ = fetch(
        client,
        "post",
        LAB + "api/kernels",
        data={"name": "python3"},
        content_type="application/json",
    )

    assert response.status_code == 403
    assert kernel_ids(client) == before


def test_cross_site_post_is_refused_even_with_a_token(notebook, owner):
    client = logged_in(owner, enforce_csrf_checks=True)
    extra = xsrf_headers(client)
    extra["headers"]["Origin"] = "https://evil.example"

    response, _ = fetch(
        client,
        "post",
        LAB + "api/kernels",
        data={"name": "python3"},
        content_type="application/json",
        **extra,
    )

    assert response.status_code == 403


def test_unreachable_notebook_answers_502(monkeypatch, owner, activity):
    target = proxy.NotebookTarget("127.0.0.1", free_port(), "t" * 48, LAB)
    monkeypatch.setattr(proxy, "get_job_for_user", lambda user, pk: SimpleNamespace(pk=pk))
    monkeypatch.setattr(proxy, "resolve_target", lambda job: target)

    response, body = fetch(logged_in(owner), "get", LAB + "lab")

    assert response.status_code == 502
    assert b"The notebook is not answering" in body


# --- websockets ------------------------------------------------------------------


def websocket(path, user=None, client=None, subprotocols=None):
    from config.asgi import application

    headers = [(b"origin", b"http://testserver"), (b"host", b"testserver")]
    if client is not None:
        cookie = (
            f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
        )
        headers.append((b"cookie", cookie.encode()))
    return WebsocketCommunicator(application, path, headers=headers, subprotocols=subprotocols)


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


async def execute_result(communicator, msg_id, decode):
    """The text/plain result of `msg_id`, reading frames until it comes."""
    while True:
        frame = await communicator.receive_output(timeout=30)
        assert frame["type"] == "websocket.send", frame
        message = decode(frame)
        if (
            message["parent_header"].get("msg_id") == msg_id
            and message["header"]["msg_type"] == "execute_result"
        ):
            return message["content"]["data"]["text/plain"]


def test_kernel_runs_code_through_the_proxy(notebook, owner, activity):
    from jupyter_server.services.kernels.connection.base import (
        deserialize_msg_from_ws_v1,
        serialize_msg_to_ws_v1,
    )

    client = logged_in(owner, enforce_csrf_checks=True)
    extra = xsrf_headers(client)
    response, body = fetch(
        client,
        "post",
        LAB + "api/kernels",
        data={"name": "python3"},
        content_type="application/json",
        **extra,
    )
    assert response.status_code == 201, body
    assert_token_hidden(notebook.token, response, body)
    kernel = json.loads(body)["id"]
    session = uuid.uuid4().hex
    channels = f"{LAB}api/kernels/{kernel}/channels?session_id={session}"

    async def binary_protocol():
        # JupyterLab's protocol: binary frames, negotiated with a subprotocol.
        communicator = websocket(channels, client=client, subprotocols=[KERNEL_PROTOCOL])
        connected, subprotocol = await communicator.connect(timeout=30)
        assert connected
        assert subprotocol == KERNEL_PROTOCOL
        msg_id, message = execute_request("1+1", session)
        packed = [json.dumps(message[part]).encode() for part in ("header", "parent_header")]
        packed += [json.dumps(message[part]).encode() for part in ("metadata", "content")]
        await communicator.send_to(bytes_data=serialize_msg_to_ws_v1(packed, "shell"))

        def decode(frame):
            channel, parts = deserialize_msg_from_ws_v1(frame["bytes"])
            header, parent, metadata, content = (json.loads(part) for part in parts[:4])
            return {"header": header, "parent_header": parent, "content": content}

        result = await execute_result(communicator, msg_id, decode)
        await communicator.disconnect()
        return result

    async def json_protocol():
        # Without a subprotocol Jupyter speaks JSON in text frames.
        communicator = websocket(channels, client=client)
        connected, subprotocol = await communicator.connect(timeout=30)
        assert connected
        assert subprotocol is None
        msg_id, message = execute_request("6*7", session)
        await communicator.send_to(text_data=json.dumps(message))
        result = await execute_result(communicator, msg_id, lambda frame: json.loads(frame["text"]))
        await communicator.disconnect()
        return result

    try:
        proxy._recorded.clear()  # websocket traffic counts as use too
        used = len(activity)
        assert async_to_sync(binary_protocol)() == "2"
        assert len(activity) == used + 1
        assert async_to_sync(json_protocol)() == "42"
    finally:
        response, _ = fetch(client, "delete", f"{LAB}api/kernels/{kernel}", **extra)
        assert response.status_code == 204


def test_a_user_who_loses_access_loses_the_open_kernel_socket(
    notebook, owner, monkeypatch, settings
):
    """Access is asked again between frames: once it is gone, the next frame the user
    sends never reaches the kernel, and the socket closes with 4403."""
    settings.GANTRY_WS_RECHECK_SECONDS = 0
    client = logged_in(owner, enforce_csrf_checks=True)
    extra = xsrf_headers(client)
    response, body = fetch(
        client, "post", LAB + "api/kernels", data={"name": "python3"},
        content_type="application/json", **extra,
    )
    kernel = json.loads(body)["id"]
    session = uuid.uuid4().hex
    channels = f"{LAB}api/kernels/{kernel}/channels?session_id={session}"
    allowed, removed = proxy.get_job_for_user, []

    def get_job_for_user(user, pk):  # until the owner is removed from the project
        if removed:
            raise Http404
        return allowed(user, pk)

    monkeypatch.setattr(proxy, "get_job_for_user", get_job_for_user)

    async def go():
        communicator = websocket(channels, client=client)
        connected, _ = await communicator.connect(timeout=30)
        assert connected
        msg_id, message = execute_request("6*7", session)
        await communicator.send_to(text_data=json.dumps(message))
        first = await execute_result(communicator, msg_id, lambda f: json.loads(f["text"]))
        removed.append(owner)
        msg_id, message = execute_request("open('/tmp/x', 'w')", session)
        await communicator.send_to(text_data=json.dumps(message))
        while True:
            frame = await communicator.receive_output(timeout=30)
            if frame["type"] == "websocket.close":
                return first, frame["code"]
            # Only what the kernel said before access was taken away may still arrive.
            assert json.loads(frame["text"])["parent_header"].get("msg_id") != msg_id

    try:
        assert async_to_sync(go)() == ("42", 4403)
    finally:
        removed.clear()
        response, _ = fetch(client, "delete", f"{LAB}api/kernels/{kernel}", **extra)
        assert response.status_code == 204


def test_websocket_refuses_anonymous_with_4403(notebook):
    async def go():
        communicator = websocket(LAB + "api/events/subscribe")
        await communicator.connect()
        closed = await communicator.receive_output(timeout=10)
        return closed

    closed = async_to_sync(go)()
    assert closed == {"type": "websocket.close", "code": 4403}


def test_websocket_refuses_outsider_with_4404(notebook, outsider):
    client = logged_in(outsider)

    async def go():
        communicator = websocket(LAB + "api/events/subscribe", client=client)
        await communicator.connect()
        return await communicator.receive_output(timeout=10)

    assert async_to_sync(go)() == {"type": "websocket.close", "code": 4404}


# --- pieces ----------------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 3, 7, 100])
def test_token_is_removed_across_chunk_borders(size):
    secret = b"s3cr3t-token"
    text = b'{"token": "s3cr3t-token", "x": "s3cr3t-tokens3cr3t-token!"}'

    async def scrub():
        async def chunks():
            for start in range(0, len(text), size):
                yield text[start : start + size]

        return b"".join([chunk async for chunk in proxy._without(chunks(), secret)])

    assert async_to_sync(scrub)() == b'{"token": "", "x": "!"}'


def test_gantry_cookies_and_credentials_stay_home():
    request = RequestFactory().post(
        "/jobs/1/lab/api/kernels",
        HTTP_COOKIE=f"{settings.SESSION_COOKIE_NAME}=s; {settings.CSRF_COOKIE_NAME}=c; _xsrf=x; app=1",
        HTTP_AUTHORIZATION="Token gantry-api-token",
        HTTP_X_CSRFTOKEN="c",
        HTTP_ORIGIN="http://testserver",
        HTTP_CONNECTION="keep-alive, X-Private",
        HTTP_X_PRIVATE="hop",
        HTTP_ACCEPT="application/json",
    )
    target = proxy.NotebookTarget("127.0.0.1", 1, "jupyter-token", LAB)

    headers = {
        name.lower(): value for name, value in proxy._upstream_headers(request, target).items()
    }

    assert headers["cookie"] == "app=1"
    assert headers["authorization"] == "token jupyter-token"
    assert headers["accept"] == "application/json"
    for name in ("x-csrftoken", "origin", "connection", "x-private", "host"):
        assert name not in headers
