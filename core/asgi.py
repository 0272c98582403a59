"""The HTTP side of the ASGI application: Django's handler with a request's whole sync
path in one trip to a thread, and the garbage collector kept off the long-lived objects."""

import gc
from concurrent.futures import ThreadPoolExecutor
from functools import partial

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.base import BaseHandler
from django.http import FileResponse
from django.urls import set_script_prefix


class SyncRequestHandler(ASGIHandler):
    """Django's ASGI handler for an application of sync views, served by `threads` threads.

    Django's own handler runs sync middleware and views under ASGI in many trips between
    the event loop and a thread it starts for each request: the request_started signal,
    the middleware chain, the view, each view middleware, rendering and closing each make
    one. Every trip waits for the other side to get the GIL, and a thread is started and
    joined per request. Here the body is read on the event loop, then signals, middleware,
    view and (for a complete response) closing run in one call in a kept thread, and the
    response is sent from the loop. A bare view served 3,100-5,700 requests a second
    against 660-910 (two processes, two cores; 1,370-1,420 with one trip but a thread
    started per request).

    `threads` also bounds the views a process runs at once. More requests wait their
    turn in the event loop, in order of arrival, where waiting costs nothing: with
    a thread each, 200 requests took turns holding the GIL, each waited for its database
    answers behind everyone else's Python, and every request got slow at once (the load
    benchmark's p50 went to 3 s at 200 users). A slow upload holds no thread (its body is
    read first), nor does a streamed response while it streams.

    Async views still work: Django calls them from the thread through async_to_sync, on
    the server's event loop, and a streamed async body is sent from the loop. A streamed
    sync body is sent a chunk at a time (`stream_from_own_thread`).
    """

    def __init__(self, threads: int):
        BaseHandler.__init__(self)  # not ASGIHandler's: that loads the middleware for async
        self.load_middleware(is_async=False)
        self.threads = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="request")

    def in_thread(self, func):
        return sync_to_async(func, thread_sensitive=False, executor=self.threads)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            raise ValueError(f"Django serves HTTP here, not {scope['type']}.")
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        try:
            response = await self.in_thread(self.serve)(scope, body_file)
            if not response.streaming:
                await self.send_response(response, send)  # closed already, in serve()
            elif response.is_async:
                try:
                    await self.send_response(response, send)
                finally:
                    await self.in_thread(response.close)()
            else:
                await self.stream_from_own_thread(response, send)
        finally:
            body_file.close()

    async def stream_from_own_thread(self, response, send):
        """A sync body (a file, a zip being made) a chunk at a time, stepped and closed in a
        thread of its own: Django's handler lists it whole into memory before sending, and
        stepping it in the request threads would spread one iterator (and its database
        cursor) over several threads' connections."""
        async with ThreadSensitiveContext():
            in_own_thread = partial(sync_to_async, thread_sensitive=True)
            chunks, done = iter(response.streaming_content), object()

            async def stepped():
                while (chunk := await in_own_thread(next)(chunks, done)) is not done:
                    yield chunk

            response.streaming_content = stepped()
            try:
                await self.send_response(response, send)
            finally:
                await in_own_thread(response.close)()

    def serve(self, scope, body_file):
        """What WSGIHandler does for a request, over the ASGI request Django would make."""
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
            response._handler_class = self.__class__
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size
        if not response.streaming:
            # The content is all here: request_finished (the database connection goes
            # back to the pool) in this thread, which owns the connection.
            response.close()
        return response


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
