"""TensorBoard on a Unix socket, stopping itself when nobody has asked for a while.

This file is not imported by Gantry: `interactive.tensorboard` runs it, sandboxed, under the
TensorBoard interpreter (``python tensorboard_server.py SOCKET LOGDIR PREFIX IDLE``).
TensorBoard parses event files a job wrote, so it runs like the job's own code: as the
job's user, with no network, seeing only that job's logdir (read-only). It listens on
a Unix socket in a directory only that user (and root: the notebook origin) may enter.

Idleness is counted here, where the requests arrive: after IDLE seconds without one the
process exits, and the next request through the notebook origin starts it again.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time


def main(argv: list[str]) -> int:
    # Run as a script from jobs/ (unsandboxed), its directory would shadow the package
    # with interactive/tensorboard.py.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    from tensorboard import default, program
    from werkzeug import serving

    socket_path, logdir, prefix, idle = argv[0], argv[1], argv[2], float(argv[3])
    last = [time.monotonic()]

    class UnixSocketServer(program.TensorBoardServer):
        def __init__(self, wsgi_app, flags):
            def app(environ, start_response):
                last[0] = time.monotonic()
                return wsgi_app(environ, start_response)

            if os.path.lexists(socket_path):
                os.unlink(socket_path)
            # Bound here, not by werkzeug: it makes the path absolute, and a Unix socket's
            # path may not exceed 107 bytes (the caller passes a short relative one).
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(socket_path)
            os.chmod(socket_path, 0o600)
            listener.listen(128)
            self._server = serving.make_server(
                f"unix://{socket_path}", 0, app, threaded=True, fd=listener.fileno()
            )
            listener.close()  # werkzeug holds its own duplicate of the descriptor

        def serve_forever(self):
            last[0] = time.monotonic()  # counted from when it can answer
            threading.Thread(target=self._stop_when_idle, daemon=True).start()
            self._server.serve_forever()

        def get_url(self):
            return f"unix://{socket_path}{prefix}/"

        def _stop_when_idle(self):
            while True:
                time.sleep(min(idle, 5.0))
                if time.monotonic() - last[0] > idle:
                    sys.stderr.write(f"idle for {idle:g} s: stopping\n")
                    sys.stderr.flush()
                    os.unlink(socket_path)
                    os._exit(0)

    class Board(program.TensorBoard):
        def _register_info(self, server):
            pass  # `tensorboard --list` bookkeeping, which wants a TCP port

    board = Board(plugins=default.get_plugins(), server_class=UnixSocketServer)
    board.configure(
        argv=[
            "tensorboard",
            "--logdir",
            logdir,
            "--path_prefix",
            prefix,
            # The pure-Python reader: no data server subprocess, no port of its own.
            "--load_fast",
            "false",
            "--reload_interval",
            "5",
        ]
    )
    return board.main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
