"""A free loopback port for a server that Gantry (a DDP rendezvous on the local backend)
or its tests (etcd, the API server, Ceph, the registry…) start and that binds it later.

The port the kernel hands out for `bind(("127.0.0.1", 0))` comes from the ephemeral range
(`/proc/sys/net/ipv4/ip_local_port_range`), the range every outgoing connection also takes
its source port from. Between choosing such a port and the server binding it, any
connection on the machine may take it: CI once saw etcd stop with "bind: address already
in use" that way. So the port is drawn below that range, where only servers that name
their port bind, and checked free by binding it. The draw uses `secrets`, not `random`:
pytest-randomly seeds `random` alike in every xdist worker, so they would all draw the
same ports in the same order.
"""

import contextlib
import secrets
import socket
from pathlib import Path

LOWEST = 10000  # below it: the well-known and registered ports other software names


def ephemeral_range() -> tuple[int, int]:
    with contextlib.suppress(OSError, ValueError):
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return low, high
    return 32768, 60999  # Linux's default


def free_port(host: str = "127.0.0.1") -> int:
    low, high = ephemeral_range()
    first, last = (LOWEST, low - 1) if low - LOWEST >= 1000 else (high + 1, 65535)
    for _ in range(200):
        port = first + secrets.randbelow(last - first + 1)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue  # someone's server is there: draw again
            return port
    with socket.socket() as sock:  # a range this full: the kernel's choice, as before
        sock.bind((host, 0))
        return sock.getsockname()[1]
