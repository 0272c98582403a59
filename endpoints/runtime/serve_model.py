"""One replica of a model endpoint: Seldon's MLServer serving one model on a Unix socket.

Run by the serving virtualenv's Python (endpoints/runtime/requirements.txt), inside the
replica's sandbox; Gantry never imports it. It starts MLServer (KServe v2 REST) with
the runtime named RUNTIME (RUNTIMES: Gantry's scikit-learn, TorchScript or MLflow runtime
of gantry_runtime.py, as endpoints.local.served_file chose) on a Unix socket instead of a
TCP port, so the only way in is the socket file Gantry's gateway connects to; MLServer's
gRPC server listens on a free port of the sandbox's own loopback (no network beyond
it), and its metrics server is off.

It stops itself after `idle_seconds` without a request (scale to zero; 0: never), and
says so on its output as it stops: Gantry reads when the replica stopped from that line's
write (endpoints.local.record_replicas, for usage reports).

    python serve_model.py SOCKET RUNTIME MODEL_FILE NAME VERSION IDLE_SECONDS
"""

from __future__ import annotations

import asyncio
import sys
import time

# Beside this file, on the script's path.
import gantry_runtime
from mlserver import MLServer
from mlserver.settings import ModelParameters, ModelSettings, Settings

# Each runtime by its name in gantry_runtime, looked up only for the one served (the
# MLflow runtime imports MLflow when it is first asked for).
RUNTIMES = {
    "sklearn": "CheckedSKLearnModel",
    "torchscript": "CheckedTorchScriptModel",
    "mlflow": "CheckedMLflowModel",
}


class IdleClock:
    """ASGI middleware: the time of the last request the replica answered."""

    def __init__(self, app):
        self.app = app
        self.last = time.monotonic()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and not scope["path"].startswith("/v2/health"):
            self.last = time.monotonic()
        await self.app(scope, receive, send)


async def serve(
    socket_path: str, runtime: str, model_file: str, name: str, version: str, idle: float
) -> None:
    settings = Settings(
        host="127.0.0.1",
        grpc_port=0,
        metrics_endpoint=None,
        parallel_workers=0,
        debug=False,
        load_models_at_startup=False,
    )
    # MLServer's own hook for uvicorn's options: bind the REST server to a Unix socket.
    settings._custom_rest_server_settings = {"uds": socket_path}
    model = ModelSettings(
        name=name,
        implementation=getattr(gantry_runtime, RUNTIMES[runtime]),
        parameters=ModelParameters(uri=model_file, version=version),
    )
    server = MLServer(settings)
    app = server._rest_server._app
    clock = IdleClock(app.middleware_stack or app.build_middleware_stack())
    app.middleware_stack = clock
    running = asyncio.ensure_future(server.start([model]))
    while idle > 0 and not running.done():
        await asyncio.sleep(min(1.0, idle / 4))
        if time.monotonic() - clock.last > idle:
            print(f"no request for {idle:g} s: stopping (scale to zero)", flush=True)
            await server.stop()
            break
    await running


def main(argv: list[str]) -> None:
    socket_path, runtime, model_file, name, version, idle = argv
    asyncio.run(serve(socket_path, runtime, model_file, name, version, float(idle)))


if __name__ == "__main__":
    main(sys.argv[1:])
