"""The gateway's connections to a replica: calls share a pooled keep-alive connection,
and a restarted replica (a new socket) gets new ones. The replica here is a small HTTP
server on the replica's socket path, as MLServer listens there."""

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from endpoints import gateway, local


@pytest.fixture
def replica(settings, monkeypatch):
    # A short folder: a Unix socket's path is at most 107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="gw-", dir="/tmp"))
    settings.GANTRY_JOBS_DIR = folder
    monkeypatch.setattr(local, "endpoint_uid", lambda pk: os.getuid())
    replica = local.Replica(1, 2)
    replica.socket_dir.mkdir(parents=True)
    yield replica
    shutil.rmtree(folder, ignore_errors=True)


async def start_replica(replica, connections: list):
    async def answer(reader, writer):
        connections.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    (int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                     if line.startswith(b"content-length:")),
                    0,
                )  # fmt: skip
                await reader.readexactly(length)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: 12\r\n\r\n{\"ok\": true}"
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    path = replica.socket_dir / local.SOCKET
    path.unlink(missing_ok=True)
    return await asyncio.start_unix_server(answer, path=str(path))


def test_calls_to_a_replica_share_one_pooled_connection(replica):
    async def go():
        connections = []
        server = await start_replica(replica, connections)
        client = gateway._client(replica)
        for body in (b"", b'{"inputs": []}', b""):
            status, content, content_type = await client.exchange(
                "POST", "v2/models/m/infer", body, "application/json"
            )
            assert (status, content, content_type) == (200, b'{"ok": true}', "application/json")
        assert gateway._client(replica) is client
        assert len(connections) == 1

        # The replica restarted: a new socket, a new pool.
        server.close()
        await server.wait_closed()
        restarted = await start_replica(replica, connections)
        again = gateway._client(replica)
        assert again is not client
        assert (await again.exchange("GET", "v2/health/ready", b"", ""))[0] == 200
        assert len(connections) == 2
        await again.close()
        restarted.close()

    asyncio.run(go())
