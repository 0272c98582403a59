"""Exit 0 when PostgreSQL and Redis answer on their usual local ports (used by the Makefile)."""

import socket
import sys

for port in (5432, 6379):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        print(f"nothing listens on 127.0.0.1:{port}", file=sys.stderr)
        sys.exit(1)
