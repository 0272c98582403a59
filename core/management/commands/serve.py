"""Run Gantry's web servers and the background worker together, in the foreground.

Two layouts:

- `manage.py serve` (what `make run` uses): uvicorn serving everything (pages, API,
  websockets) through the stock ASGI application (config/asgi.py), plus django-q's
  cluster. One machine, one port, no proxy.
- `manage.py serve --production`: the production stack on this machine, as
  platform/nginx/ describes it: gunicorn (threads) runs the WSGI application for pages
  and the API, uvicorn the ASGI application for websockets, both on Unix sockets, and
  nginx in front on `--port`, routing by path (platform/nginx/gantry-routes.conf), plus
  the worker. With `--tls-cert` and `--tls-key` nginx terminates TLS itself; without them
  it expects a TLS-terminating proxy in front and passes on its `X-Forwarded-Proto`.

Both also start the notebook origin (interactive/origin.py) on GANTRY_NOTEBOOK_PORT.

Any child that dies stops the rest; Ctrl-C or SIGTERM stops them all within seconds:
uvicorn gives requests still in flight (a half-sent upload, a long poll) GRACEFUL_SECONDS
and then runs its shutdown, where the notebook origin stops the TensorBoard servers it
started (they run in sessions of their own, out of Ctrl-C's reach). A child still there
STOP_SECONDS after SIGTERM is killed.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

WORKER_NICENESS = 10
# Without a bound uvicorn waits for every open request, so one browser tab could hold the
# origin until STOP_SECONDS and its SIGKILL, which skipped the shutdown that stops the
# TensorBoards: `make run` took 16 s to stop and left them running.
GRACEFUL_SECONDS = 3
STOP_SECONDS = 15
ROUTES = Path(settings.BASE_DIR) / "platform" / "nginx" / "gantry-routes.conf"


def nginx_binary() -> str | None:
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if os.access(p, os.X_OK)), None
    )


def nginx_conf(*, prefix: Path, listen: str, wsgi: str, asgi: str, tls: tuple[str, str] | None) -> str:
    """A whole nginx.conf for the loopback production stack: the upstreams, one server,
    and the routes every Gantry nginx shares (platform/nginx/gantry-routes.conf)."""
    ssl = (
        f"        listen {listen} ssl;\n"
        f"        ssl_certificate {tls[0]};\n"
        f"        ssl_certificate_key {tls[1]};\n"
        if tls
        else f"        listen {listen};\n"
    )
    return f"""\
worker_processes 1;
pid {prefix}/nginx.pid;
error_log stderr warn;
events {{ worker_connections 2048; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    # Behind TLS terminated here, https; behind another proxy, what that proxy says.
    map $http_x_forwarded_proto $gantry_forwarded_proto {{ default $scheme; https https; }}
    map $http_upgrade $connection_upgrade {{ default upgrade; "" close; }}
    upstream gantry_wsgi {{ server unix:{wsgi}; keepalive 16; }}
    upstream gantry_asgi {{ server unix:{asgi}; }}
    server {{
{ssl}        server_name _;
        include {ROUTES};
    }}
}}
"""


class Command(BaseCommand):
    help = "Start the web server(s) and the background worker in the foreground."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.GANTRY_HOST)
        parser.add_argument("--port", type=int, default=settings.GANTRY_PORT)
        parser.add_argument(
            "--web-workers", type=int, default=1,
            help="Processes of the web server (uvicorn; gunicorn with --production).",
        )
        parser.add_argument(
            "--threads", type=int, default=4,
            help="With --production: request threads in each gunicorn process.",
        )
        parser.add_argument("--no-worker", action="store_true", help="Start only the web server.")
        parser.add_argument(
            "--production", action="store_true",
            help="gunicorn (pages, API) and uvicorn (websockets) behind nginx.",
        )
        parser.add_argument("--tls-cert", help="With --production: nginx terminates TLS with this certificate.")
        parser.add_argument("--tls-key", help="With --production: the certificate's private key.")

    def handle(self, *args, host, port, web_workers, threads, no_worker, production, tls_cert, tls_key, **options):
        if web_workers < 1 or threads < 1:
            raise CommandError("--web-workers and --threads must be 1 or more.")
        if bool(tls_cert) != bool(tls_key):
            raise CommandError("--tls-cert and --tls-key go together.")
        if (tls_cert or tls_key) and not production:
            raise CommandError("--tls-cert and --tls-key need --production.")
        # The children (web, worker, notebook origin) read their settings afresh: a port
        # given here must reach GANTRY_URL's default there, or jobs call the wrong port.
        os.environ["GANTRY_PORT"] = str(port)
        os.environ["GANTRY_HOST"] = host
        python = sys.executable
        children: dict[str, subprocess.Popen] = {}
        run_dir = None
        if production:
            run_dir, scheme = self.start_production(
                children, python, host, port, web_workers, threads, tls_cert, tls_key
            )
        else:
            scheme = "http"
            uvicorn = [python, "-m", "uvicorn", "config.asgi:application", "--no-access-log"]
            uvicorn += ["--lifespan", "on", "--host", host, "--port", str(port)]
            uvicorn += ["--timeout-graceful-shutdown", str(GRACEFUL_SECONDS)]
            if web_workers > 1:
                uvicorn += ["--workers", str(web_workers)]
            children["web"] = subprocess.Popen(uvicorn)
        # Notebooks are served from an origin of their own, on a port of its own (interactive/proxy.py).
        children["notebooks"] = subprocess.Popen([
            python, "-m", "uvicorn", "interactive.origin:application", "--no-access-log",
            "--host", host, "--port", str(settings.GANTRY_NOTEBOOK_PORT),
            "--timeout-graceful-shutdown", str(GRACEFUL_SECONDS),
        ])
        if not no_worker:
            # Behind the web processes for the CPU (and so are the local jobs it starts):
            # an admission pass or a job's start-up must not stall the pages people wait on.
            children["worker"] = subprocess.Popen(
                [python, "manage.py", "qcluster"], preexec_fn=lambda: os.nice(WORKER_NICENESS)
            )
        shown = f"[{host}]" if ":" in host else host
        self.stdout.write(self.style.SUCCESS(f"\n  Gantry is up at {scheme}://{shown}:{port}/\n"))
        try:
            self.supervise(children)
        finally:
            if run_dir:
                shutil.rmtree(run_dir, ignore_errors=True)

    def start_production(self, children, python, host, port, web_workers, threads, tls_cert, tls_key):
        if settings.DEBUG:
            raise CommandError("--production needs DEBUG off (GANTRY_ENV=production).")
        nginx = nginx_binary()
        if not nginx:
            raise CommandError("--production needs nginx (apt-get install nginx).")
        # Sockets, nginx's pid and buffers. 0711: nginx's workers (another user when the
        # master runs as root) reach the sockets and the buffer folders nginx makes them.
        run_dir = Path(tempfile.mkdtemp(prefix="gantry-serve-"))
        run_dir.chmod(0o711)
        wsgi, asgi = run_dir / "wsgi.sock", run_dir / "asgi.sock"
        children["wsgi"] = subprocess.Popen([
            python, "-m", "gunicorn", "config.wsgi:application",
            "--bind", f"unix:{wsgi}",
            "--worker-class", "gthread", "--workers", str(web_workers), "--threads", str(threads),
            # nginx buffers slow clients; a request that takes longer is stuck, not slow.
            "--timeout", "120", "--graceful-timeout", "15",
            "--forwarded-allow-ips", "*", "--no-control-socket",
        ])
        children["asgi"] = subprocess.Popen([
            python, "-m", "uvicorn", "config.asgi:application", "--uds", str(asgi),
            "--no-access-log", "--lifespan", "on",
            "--proxy-headers", "--forwarded-allow-ips", "*",
            "--timeout-graceful-shutdown", str(GRACEFUL_SECONDS),
        ])
        listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        tls = (str(Path(tls_cert).resolve()), str(Path(tls_key).resolve())) if tls_cert else None
        conf = run_dir / "nginx.conf"
        conf.write_text(nginx_conf(prefix=run_dir, listen=listen, wsgi=str(wsgi), asgi=str(asgi), tls=tls))
        # nginx only once both sockets exist: before that it would answer 502.
        deadline = time.monotonic() + 60
        while not (wsgi.exists() and asgi.exists()):
            for name, child in children.items():
                if child.poll() is not None:
                    self.stop_all(children)
                    raise CommandError(f"{name} exited with code {child.returncode} while starting.")
            if time.monotonic() > deadline:
                self.stop_all(children)
                raise CommandError("gunicorn and uvicorn did not open their sockets within 60 s.")
            time.sleep(0.1)
        children["proxy"] = subprocess.Popen(
            [nginx, "-p", str(run_dir), "-c", str(conf), "-g", "daemon off;"]
        )
        return run_dir, "https" if tls else "http"

    def supervise(self, children):
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while not stopping:
                for name, child in children.items():
                    if child.poll() is not None:
                        self.stderr.write(f"{name} exited with code {child.returncode}; stopping.")
                        stopping = True
                time.sleep(0.5)
        finally:
            self.stop_all(children)

    @staticmethod
    def stop_all(children):
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        for child in children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
