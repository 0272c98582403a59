"""core.asgi.ConcurrencyLimit: at most `limit` views at once, in arrival order, with
slots taken only once a body is in and given back when the response starts."""

import asyncio

from core.asgi import ConcurrencyLimit


def run(coro):
    return asyncio.run(coro)


def make_app(log, *, hold=0.02):
    state = {"now": 0, "most": 0}

    async def app(scope, receive, send):
        while (await receive()).get("more_body"):
            pass
        state["now"] += 1
        state["most"] = max(state["most"], state["now"])
        log.append(scope["path"])
        await asyncio.sleep(hold)  # the view
        state["now"] -= 1
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await asyncio.sleep(hold)  # a streamed body: no longer counted
        await send({"type": "http.response.body", "body": b"ok"})

    return app, state


async def request(app, path, chunks=1, gap=0.0):
    sent = []
    parts = [{"type": "http.request", "body": b"x", "more_body": i < chunks - 1} for i in range(chunks)]

    async def receive():
        if parts:
            await asyncio.sleep(gap)
            return parts.pop(0)
        await asyncio.sleep(3600)

    async def send(message):
        sent.append(message)

    await app({"type": "http", "path": path}, receive, send)
    return sent


def test_at_most_limit_views_at_once_served_in_order():
    log = []
    inner, state = make_app(log)
    app = ConcurrencyLimit(inner, 2)

    async def go():
        tasks = []
        for i in range(8):
            tasks.append(asyncio.create_task(request(app, f"/{i}")))
            await asyncio.sleep(0)  # arrive one after the other
        return await asyncio.gather(*tasks)

    answers = run(go())
    assert state["most"] == 2
    assert log == [f"/{i}" for i in range(8)]
    assert all(a[-1]["body"] == b"ok" for a in answers)


def test_a_slow_upload_holds_no_slot():
    log = []
    inner, state = make_app(log)
    app = ConcurrencyLimit(inner, 1)

    async def go():
        upload = asyncio.create_task(request(app, "/upload", chunks=20, gap=0.01))
        await asyncio.sleep(0.01)
        quick = asyncio.create_task(request(app, "/quick"))
        await asyncio.gather(upload, quick)

    run(go())
    assert log == ["/quick", "/upload"]  # the quick one did not wait for the upload


def test_no_limit_and_websockets_pass_through():
    log = []
    inner, state = make_app(log)

    async def go(app):
        await asyncio.gather(*(request(app, f"/{i}") for i in range(5)))

    run(go(ConcurrencyLimit(inner, 0)))
    assert state["most"] == 5
    seen = []

    async def websocket_app(scope, receive, send):
        seen.append(scope["type"])

    run(ConcurrencyLimit(websocket_app, 1)({"type": "websocket"}, None, None))
    assert seen == ["websocket"]


def test_long_lived_objects_are_frozen_once_after_warm_up():
    """FreezeLongLivedObjects: after the process's first `after` HTTP requests (not
    websockets) what it holds leaves the collector's generations, once."""
    import gc

    from core.asgi import FreezeLongLivedObjects

    async def app(scope, receive, send):
        pass

    wrapped = FreezeLongLivedObjects(app, after=3)
    gc.unfreeze()
    try:
        for _ in range(5):
            run(wrapped({"type": "websocket"}, None, None))
        run(wrapped({"type": "http"}, None, None))
        run(wrapped({"type": "http"}, None, None))
        assert gc.get_freeze_count() == 0
        run(wrapped({"type": "http"}, None, None))
        frozen = gc.get_freeze_count()
        assert frozen > 0
        gc.unfreeze()
        run(wrapped({"type": "http"}, None, None))
        assert gc.get_freeze_count() == 0  # only once
    finally:
        gc.unfreeze()
