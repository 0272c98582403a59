"""Real receivers on loopback for the notification tests: an HTTP server that answers
from a script (status codes, or a stall past the client's timeout), and aiosmtpd."""

from __future__ import annotations

import contextlib
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from core.ports import free_port


class Receiver:
    """A webhook endpoint. `script` says how to answer each request in turn: an HTTP
    status, or ("stall", seconds) to answer 200 only after that long; once the script is
    used up every request gets 200. `received` holds (headers, body) of each request.
    With `tls` (certificate and key files) it speaks HTTPS and keeps in `server_names`
    the name each client asked for (SNI)."""

    def __init__(self, script=(), tls: tuple[str, str] | None = None):
        self.script = list(script)
        self.received: list[tuple[dict, bytes]] = []
        self.server_names: list[str | None] = []
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
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            context.sni_callback = lambda sock, name, ctx: self.server_names.append(name)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.url = f"https://127.0.0.1:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def bodies(self) -> list[dict]:
        return [json.loads(body) for _, body in self.received]


def self_signed_certificate(directory, name: str) -> tuple[str, str]:
    """A certificate for `name` that signs itself, and its key, written under `directory`;
    a client trusts it by taking the certificate file as its CA file."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = f"{directory}/cert.pem", f"{directory}/key.pem"
    with open(cert_file, "wb") as out:
        out.write(certificate.public_bytes(serialization.Encoding.PEM))
    with open(key_file, "wb") as out:
        out.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return cert_file, key_file


class Mailbox:
    """aiosmtpd's SMTP server on a free loopback port, keeping what it is sent."""

    def __init__(self):
        from aiosmtpd.controller import Controller

        self.messages: list = []
        mailbox = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):
                mailbox.messages.append(envelope)
                return "250 OK"

        self.port = free_port()
        self.controller = Controller(Handler(), hostname="127.0.0.1", port=self.port)

    def __enter__(self):
        self.controller.start()
        return self

    def __exit__(self, *exc):
        self.controller.stop()
