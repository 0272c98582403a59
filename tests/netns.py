"""A network namespace a test run makes for itself, and TCP relays across its border.

The network rule: tests send traffic only to loopback, or to addresses inside network
namespaces the test run created. `NetworkNamespace` is such a namespace: made with
`ip netns add` under a name of its own, holding only its loopback until something adds an
interface inside it, with no link to the machine's network (no veth to the host, no
route out), and deleted with everything in it by `delete()`. Whatever runs inside can
reach only the namespace's own addresses.

The one way across is a `Relay`: a listening socket made inside one namespace that copies
each connection, byte for byte, to an address in another, where it is opened. Both ends
are loopback or addresses inside the namespace, so a relay can only join what the rule
already allows. A socket belongs to the namespace of the thread that made it, so the relay
makes its listening socket with its thread switched into that namespace (setns(2), per
thread), and its outgoing ones in the thread's own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import selectors
import socket
import subprocess
import threading
from pathlib import Path

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def setns(path: str | Path) -> None:
    """Move the calling thread (or, before exec, the child) into the network namespace
    at `path`."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


@contextlib.contextmanager
def inside(path: str | Path):
    """This thread inside the namespace at `path`, and back in its own afterwards."""
    own = "/proc/thread-self/ns/net"
    back = os.open(own, os.O_RDONLY | os.O_CLOEXEC)
    try:
        setns(path)
        yield
    finally:
        if _libc.setns(back, CLONE_NEWNET) != 0:  # never leave a thread in the wrong place
            os.close(back)
            raise OSError(ctypes.get_errno(), "setns back to the thread's own namespace")
        os.close(back)


class NetworkNamespace:
    """`ip netns add gantry-<id>`, its loopback up; `run`/`ip` act inside it."""

    def __init__(self, prefix: str = "gantry"):
        self.name = f"{prefix}-{secrets.token_hex(4)}"
        self.path = Path("/run/netns") / self.name
        self.ip("link", "set", "lo", "up", create=True)

    def ip(self, *args: str, create: bool = False) -> str:
        if create:
            subprocess.run(["ip", "netns", "add", self.name], check=True, capture_output=True)
        done = subprocess.run(
            ["ip", "-n", self.name, *args], check=False, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise OSError(f"ip -n {self.name} {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def enter(self) -> None:
        """For a child's preexec_fn: the child runs inside the namespace (only the
        network: it keeps the machine's mounts, /sys and cgroups, unlike `ip netns exec`)."""
        setns(self.path)

    def delete(self) -> None:
        """The namespace goes once nothing inside it is left; its interfaces with it."""
        subprocess.run(["ip", "netns", "delete", self.name], check=False, capture_output=True)

    def exists(self) -> bool:
        return self.path.exists()


class Relay:
    """Listens on `listen` (host, port) inside `listen_ns` (None: the test's own
    namespace) and opens each connection to `target` inside `target_ns`."""

    def __init__(
        self,
        listen: tuple[str, int],
        target: tuple[str, int],
        listen_ns: NetworkNamespace | None = None,
        target_ns: NetworkNamespace | None = None,
    ):
        self.target, self.target_ns = target, target_ns
        with inside(listen_ns.path) if listen_ns else contextlib.nullcontext():
            self.server = socket.create_server(listen, reuse_port=False, backlog=128)
        self.address = self.server.getsockname()[:2]
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name=f"relay {listen}")
        self._thread.start()

    def _open(self) -> socket.socket:
        with inside(self.target_ns.path) if self.target_ns else contextlib.nullcontext():
            return socket.create_connection(self.target, timeout=10)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        try:
            upstream = self._open()
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        peers = {client: upstream, upstream: client}
        with selectors.DefaultSelector() as selector, client, upstream:
            for sock in peers:
                selector.register(sock, selectors.EVENT_READ)
            open_ = 2
            while open_ and not self._closed.is_set():
                for key, _ in selector.select(timeout=1):
                    try:
                        data = key.fileobj.recv(65536)
                    except OSError:
                        data = b""
                    if data:
                        try:
                            peers[key.fileobj].sendall(data)
                            continue
                        except OSError:  # the other side is gone: end both
                            return
                    selector.unregister(key.fileobj)  # half-close: pass the EOF on
                    with contextlib.suppress(OSError):
                        peers[key.fileobj].shutdown(socket.SHUT_WR)
                    open_ -= 1

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
