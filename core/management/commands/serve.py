"""Run the web server (HTTP and websockets) and the background worker together.

`make run` uses this: one foreground command that starts uvicorn and django-q's
cluster as child processes, prints where to go, and stops both on Ctrl-C or
when either of them dies.
"""

import os
import signal
import subprocess
import sys
import time

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Start the web server and the background worker in the foreground."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=os.environ.get("GANTRY_HOST", "127.0.0.1"))
        parser.add_argument("--port", type=int, default=int(os.environ.get("GANTRY_PORT", "8000")))
        parser.add_argument("--web-workers", type=int, default=1)
        parser.add_argument("--no-worker", action="store_true", help="Start only the web server.")

    def handle(self, *args, host, port, web_workers, no_worker, **options):
        python = sys.executable
        commands = {
            "web": [
                python,
                "-m",
                "uvicorn",
                "config.asgi:application",
                "--host",
                host,
                "--port",
                str(port),
                "--workers",
                str(web_workers),
                "--no-access-log",
                "--lifespan",
                "off",
            ],
        }
        if not no_worker:
            commands["worker"] = [python, "manage.py", "qcluster"]
        children = {name: subprocess.Popen(cmd) for name, cmd in commands.items()}
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
