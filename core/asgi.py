"""ASGI middleware for the HTTP side: a bound on views at once, and the garbage
collector kept off the long-lived objects.

Django runs every request's view in a thread of its own under ASGI. With no bound, a
burst of 200 requests makes 200 threads that take turns holding the GIL: each waits for
its database answers behind everyone else's Python, and every request gets slow at once
(the load benchmark's p50 went to 3 s at 200 users). A few views at a time per process
keep the CPU as busy; the others wait their turn in the event loop, where waiting costs
nothing, and are served in order of arrival.
"""

import asyncio
import gc


class ConcurrencyLimit:
    """At most `limit` HTTP requests of this process in their views at once (0: no limit).

    A request takes its slot once its body has been received (a slow upload holds none)
    and gives it back when its response starts (a streamed download holds none while it
    streams). Websockets are not limited: they spend their lives waiting.
    """

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit
        self.slots: asyncio.Semaphore | None = None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.limit:
            return await self.app(scope, receive, send)
        if self.slots is None:  # made here: it belongs to the server's event loop
            self.slots = asyncio.Semaphore(self.limit)
        slots = self.slots
        held = False

        async def receive_then_queue():
            nonlocal held
            message = await receive()
            if message["type"] == "http.request" and not message.get("more_body") and not held:
                await slots.acquire()
                held = True
            return message

        async def send_and_release(message):
            nonlocal held
            if message["type"] == "http.response.start" and held:
                held = False
                slots.release()
            await send(message)

        try:
            await self.app(scope, receive_then_queue, send_and_release)
        finally:
            if held:
                slots.release()


class FreezeLongLivedObjects:
    """Move what a warmed-up process holds into the collector's permanent generation.

    A web process holds ~150,000 long-lived objects (modules, URL patterns, compiled
    templates, model metadata), most made by its first requests. Each full collection
    walked them all: 80-125 ms with the GIL held, every hundred-odd requests, which
    every request then in the process waited out (the load benchmark's p99).
    `gc.freeze()` takes them out of collections; the young objects a request makes are
    collected as before. Done once, after the process's first `after` HTTP requests.
    """

    def __init__(self, app, after: int = 200):
        self.app = app
        self.remaining = after

    async def __call__(self, scope, receive, send):
        if self.remaining and scope["type"] == "http":
            self.remaining -= 1
            if not self.remaining:
                gc.freeze()
        return await self.app(scope, receive, send)
