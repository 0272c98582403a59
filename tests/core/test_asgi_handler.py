"""core.asgi.SyncRequestHandler: Django over ASGI with a request's whole sync path in one
kept thread, at most `threads` views at once, in arrival order; streamed bodies, async
views and request_finished still work as under Django's own handler.

The views live in this module (ROOT_URLCONF points here); none touches the database.
"""

import asyncio
import json
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from django.core import signals
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from core.asgi import SyncRequestHandler

seen = {"now": 0, "most": 0, "order": [], "threads": {}}
lock = threading.Lock()


def slow(request, n):
    with lock:
        seen["now"] += 1
        seen["most"] = max(seen["most"], seen["now"])
        seen["order"].append(n)
    time.sleep(0.05)
    with lock:
        seen["now"] -= 1
    return HttpResponse(f"slow {n}")


@csrf_exempt
def where(request):
    seen["threads"]["view"] = threading.get_ident()
    return HttpResponse(request.body[::-1], content_type="text/plain")


def streamed(request):
    def parts():
        for i in range(3):
            seen["threads"].setdefault("parts", set()).add(threading.get_ident())
            seen["order"].append(f"made {i}")
            yield f"part {i}\n"

    return StreamingHttpResponse(parts())


async def async_view(request):
    # Sync work an async view hands back (the database, say) runs in the request's thread.
    seen["threads"]["handed back"] = await sync_to_async(threading.get_ident)()

    async def parts():
        for i in range(3):
            yield f"async {i}\n"

    if request.GET.get("stream"):
        return StreamingHttpResponse(parts())
    return JsonResponse({"async": True, "path": request.path})


urlpatterns = [
    path("slow/<int:n>/", slow),
    path("where/", where),
    path("streamed/", streamed),
    path("async/", async_view),
]


@pytest.fixture(autouse=True)
def here(settings):
    settings.ROOT_URLCONF = __name__
    settings.ALLOWED_HOSTS = ["testserver"]
    seen.update(now=0, most=0, order=[], threads={})


def scope(url, method="GET"):
    path_, _, query = url.partition("?")
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path_, "raw_path": path_.encode(), "query_string": query.encode(),
        "root_path": "", "headers": [(b"host", b"testserver")], "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }


async def call(handler, url, method="GET", chunks=(b"",)):
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent = []

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    await handler(scope(url, method), receive, send)
    start, *bodies = sent
    assert start["type"] == "http.response.start" and not bodies[-1].get("more_body")
    return start["status"], b"".join(m.get("body", b"") for m in bodies)


def test_at_most_threads_views_at_once_served_in_order():
    handler = SyncRequestHandler(threads=2)

    async def go():
        tasks = []
        for i in range(8):
            tasks.append(asyncio.create_task(call(handler, f"/slow/{i}/")))
            await asyncio.sleep(0.002)  # arrive one after the other
        return await asyncio.gather(*tasks)

    answers = asyncio.run(go())
    assert answers == [(200, f"slow {i}".encode()) for i in range(8)]
    assert seen["most"] == 2
    assert seen["order"] == list(range(8))


def test_signals_middleware_and_view_share_one_thread_and_the_body_arrives_whole():
    handler = SyncRequestHandler(threads=2)

    def started(**kwargs):
        seen["threads"]["started"] = threading.get_ident()

    def finished(**kwargs):
        seen["threads"]["finished"] = threading.get_ident()

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    try:
        status, body = asyncio.run(call(handler, "/where/", "POST", chunks=(b"abc", b"def")))
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)
    assert (status, body) == (200, b"fedcba")
    threads = seen["threads"]
    assert threads["started"] == threads["view"] == threads["finished"] != threading.get_ident()


def test_a_streamed_sync_body_is_sent_a_chunk_at_a_time_from_one_thread():
    handler = SyncRequestHandler(threads=1)

    def finished(**kwargs):
        seen["threads"]["finished"] = threading.get_ident()

    async def go():
        sent = []

        async def receive():
            return {"type": "http.request", "body": b""}

        async def send(message):
            if message.get("body"):
                seen["order"].append(f"sent {message['body'].decode().strip()}")
            sent.append(message)

        await handler(scope("/streamed/"), receive, send)
        return b"".join(m.get("body", b"") for m in sent[1:])

    signals.request_finished.connect(finished)
    try:
        body = asyncio.run(go())
    finally:
        signals.request_finished.disconnect(finished)
    assert body == b"part 0\npart 1\npart 2\n"
    # Not listed whole first: each part is sent before the next is made.
    assert seen["order"] == ["made 0", "sent part 0", "made 1", "sent part 1", "made 2", "sent part 2"]
    assert seen["threads"]["parts"] == {seen["threads"]["finished"]}


def test_async_views_run_on_the_event_loop_with_streamed_bodies():
    handler = SyncRequestHandler(threads=1)

    status, body = asyncio.run(call(handler, "/async/"))
    assert status == 200 and json.loads(body) == {"async": True, "path": "/async/"}
    assert seen["threads"]["handed back"] in {t.ident for t in handler.threads._threads}
    status, body = asyncio.run(call(handler, "/async/?stream=1"))
    assert (status, body) == (200, b"async 0\nasync 1\nasync 2\n")


def test_unknown_paths_and_bad_hosts_get_django_answers_not_errors():
    handler = SyncRequestHandler(threads=1)

    assert asyncio.run(call(handler, "/nowhere/"))[0] == 404

    async def bad_host():
        sent = []

        async def receive():
            return {"type": "http.request", "body": b""}

        async def send(message):
            sent.append(message)

        bad = scope("/where/")
        bad["headers"] = [(b"host", b"evil.example")]
        await handler(bad, receive, send)
        return sent[0]["status"]

    assert asyncio.run(bad_host()) == 400


def test_a_client_gone_before_its_body_arrived_is_not_served():
    handler = SyncRequestHandler(threads=1)
    sent = []

    async def receive():
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    asyncio.run(handler(scope("/where/", "POST"), receive, send))
    assert sent == [] and "view" not in seen["threads"]


def test_websockets_are_not_this_handlers():
    with pytest.raises(ValueError, match="not websocket"):
        asyncio.run(SyncRequestHandler(threads=1)({"type": "websocket"}, None, None))
