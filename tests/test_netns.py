"""tests/netns.py, the helper that keeps the network rule for the real node: a namespace
the run makes has no way to the machine's network, and a relay joins exactly the one
address it names."""

from __future__ import annotations

import http.server
import subprocess
import threading

import pytest

from tests.netns import NetworkNamespace, Relay


def curl(url: str, netns: NetworkNamespace | None = None) -> str:
    command = ["curl", "-s", "-m", "3", "-o", "/dev/null", "-w", "%{http_code}", url]
    if netns is not None:
        command = ["nsenter", f"--net={netns.path}", *command]
    return subprocess.run(command, capture_output=True, text=True, check=False).stdout


@pytest.fixture
def server():
    """An HTTP server on the machine's loopback."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def test_a_namespace_reaches_only_what_a_relay_joins_and_is_gone_after_delete(server):
    netns = NetworkNamespace("gantry-test")
    relay = None
    try:
        assert netns.exists()
        links = [line.split(": ")[1] for line in netns.ip("-o", "link").splitlines()]
        assert links == ["lo"]  # nothing else
        assert netns.ip("-4", "route") == ""  # no way out
        # The machine's loopback is not the namespace's.
        assert curl(f"http://127.0.0.1:{server}/", netns) == "000"
        relay = Relay(("127.0.0.1", server), ("127.0.0.1", server), listen_ns=netns)
        assert curl(f"http://127.0.0.1:{server}/", netns) == "200"
        # The relay listens inside the namespace only.
        assert relay.address == ("127.0.0.1", server)
        relay.close()
        relay = None
        assert curl(f"http://127.0.0.1:{server}/", netns) == "000"
    finally:
        if relay is not None:
            relay.close()
        netns.delete()
    assert not netns.exists()


def test_a_relay_out_of_a_namespace_reaches_a_server_inside_it(server):
    netns = NetworkNamespace("gantry-test")
    inside_server = subprocess.Popen(
        ["nsenter", f"--net={netns.path}", "python3", "-m", "http.server", "8000",
         "--bind", "127.0.0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    relay = Relay(("127.0.0.1", 0), ("127.0.0.1", 8000), target_ns=netns)
    try:
        port = relay.address[1]
        for _ in range(50):  # the server inside starts
            if curl(f"http://127.0.0.1:{port}/") == "200":
                break
            threading.Event().wait(0.1)
        assert curl(f"http://127.0.0.1:{port}/") == "200"
    finally:
        relay.close()
        inside_server.kill()
        inside_server.wait()
        netns.delete()
