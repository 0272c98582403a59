"""core.ports: the ports tests and the local backend hand to servers they start later."""

import random
import socket

from core.ports import ephemeral_range, free_port


def test_a_free_port_lies_below_the_range_outgoing_connections_draw_from():
    # CI's etcd once lost its port between the choice and its bind: the kernel's own
    # choice (bind to 0) comes from the ephemeral range, where any connection's source
    # port may land in the meantime.
    low, high = ephemeral_range()
    ports = {free_port() for _ in range(50)}
    assert all(port < low or port > high for port in ports)
    for port in list(ports)[:5]:
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))  # free indeed
            server.listen()


def test_a_taken_port_is_never_handed_out():
    held = []
    try:
        for _ in range(20):
            sock = socket.socket()
            sock.bind(("127.0.0.1", free_port()))
            sock.listen()
            held.append(sock)
        taken = {sock.getsockname()[1] for sock in held}
        assert not taken & {free_port() for _ in range(200)}
    finally:
        for sock in held:
            sock.close()


def test_workers_seeded_alike_draw_different_ports():
    # pytest-randomly seeds `random` the same in every xdist worker.
    random.seed(7)
    first = [free_port() for _ in range(5)]
    random.seed(7)
    assert [free_port() for _ in range(5)] != first
