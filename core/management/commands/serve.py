"""Run the web server (HTTP and websockets) and the background worker together.

`make run` uses this: one foreground command that starts uvicorn and django-q's
cluster as child processes, prints where to go, and stops both on Ctrl-C or
when either of them dies.
"""

import os
import signal
import socket
import subprocess
import sys
import time

from django.core.management.base import BaseCommand

WORKER_NICENESS = 10


def reuse_port_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    # uvicorn --fd takes the socket for a Unix one and leaves Nagle on: set here, accepted
    # connections inherit it (without it every small response waits 40 ms for an ACK).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


class Command(BaseCommand):
    help = "Start the web server and the background worker in the foreground."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("GANTRY_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("GANTRY_PORT", "8000")))
        parser.add_argument("--web-workers", type=int, default=1)
        parser.add_argument("--no-worker", action="store_true", help="Start only the web server.")

    def handle(self, *args, host, port, web_workers, no_worker, **options):
        python = sys.executable
        uvicorn = [python, "-m", "uvicorn", "config.asgi:application"]
        uvicorn += ["--no-access-log", "--lifespan", "off"]
        children = {}
        if web_workers == 1:
            children["web"] = subprocess.Popen([*uvicorn, "--host", host, "--port", str(port)])
        else:
            # One socket per web process on the same port (SO_REUSEPORT): the kernel spreads
            # connections over them evenly. With one shared socket (uvicorn --workers), the
            # process that wins a burst of accepts keeps those keep-alive connections, and
            # the load benchmark saw one worker busy while the other idled.
            for n in range(web_workers):
                sock = reuse_port_socket(host, port)
                children[f"web {n + 1}"] = subprocess.Popen(
                    [*uvicorn, "--fd", str(sock.fileno())], pass_fds=[sock.fileno()]
                )
                sock.close()  # the child has its copy
        if not no_worker:
            # Behind the web processes for the CPU (and so are the local jobs it starts):
            # an admission pass or a job's start-up must not stall the pages people wait on.
            children["worker"] = subprocess.Popen(
                [python, "manage.py", "qcluster"], preexec_fn=lambda: os.nice(WORKER_NICENESS)
            )
        self.stdout.write(self.style.SUCCESS(f"\n  Gantry is up at http://{host}:{port}/\n"))

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
            for child in children.values():
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 15
            for child in children.values():
                try:
                    child.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.kill()
