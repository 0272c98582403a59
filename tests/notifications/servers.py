"""Real receivers on loopback for the notification tests: an HTTP server that answers
from a script (status codes, or a stall past the client's timeout), and aiosmtpd."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """A webhook endpoint. `script` says how to answer each request in turn: an HTTP
    status, or ("stall", seconds) to answer 200 only after that long; once the script is
    used up every request gets 200. `received` holds (headers, body) of each request."""

    def __init__(self, script=()):
        self.script = list(script)
        self.received: list[tuple[dict, bytes]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.received.append((dict(self.headers), body))
                    step = receiver.script.pop(0) if receiver.script else 200
                if isinstance(step, tuple):
                    time.sleep(step[1])
                    step = 200
                self.send_response(step)
                self.send_header("Content-Length", "2")
                self.end_headers()
                with contextlib.suppress(OSError):  # the client gave up waiting
                    self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[dict]:
        return [json.loads(body) for _, body in self.received]


class Mailbox:
    """aiosmtpd's SMTP server on a free loopback port, keeping what it is sent."""

    def __init__(self):
        import socket

        from aiosmtpd.controller import Controller

        self.messages: list = []
        mailbox = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                mailbox.messages.append(envelope)
                return "250 OK"

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    def __enter__(self):
        self.controller.start()
        return self

    def __exit__(self, *exc):
        self.controller.stop()
