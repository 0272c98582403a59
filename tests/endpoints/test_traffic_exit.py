"""The gateway's record of the last requests survives the web server's stop: a real uvicorn
(run as production runs it) stopped with SIGTERM right after a call, well inside the
buffer's one-second flush, has written that call's row when it has exited. uvicorn ends
by re-raising the signal, so no atexit handler runs: the ASGI lifespan's shutdown does it."""

import signal

import httpx
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from endpoints import services
from endpoints.models import EndpointRequest
from modelhub import services as hub_services
from tests.endpoints.builders import MLMODEL
from tests.jobs.test_browser import serving_asgi

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_the_last_calls_before_a_stop_are_recorded(owner, project, tmp_path):
    model = hub_services.create_model(owner, project, name="digits")
    files = [
        ("MLmodel", SimpleUploadedFile("MLmodel", MLMODEL)),
        ("model.pkl", SimpleUploadedFile("model.pkl", b"pickle")),
    ]
    hub_services.upload_version(owner, model, files)
    endpoint = services.create_endpoint(owner, project, name="digits", model=model, version=1)
    _, secret = services.create_endpoint_token(owner, endpoint, "a service")
    path = f"/serve/{project.tenant.slug}/{project.slug}/digits/invocations"

    with serving_asgi(tmp_path) as (url, server):
        # GET on invocations: refused by the gateway (no model server needed), and logged.
        answer = httpx.get(url + path, headers={"Authorization": f"Bearer {secret}"})
        assert answer.status_code == 405, answer.text
        server.send_signal(signal.SIGTERM)
        assert server.wait(20) == -signal.SIGTERM  # a graceful stop, then the signal

    (row,) = EndpointRequest.objects.filter(endpoint=endpoint)
    assert (row.method, row.path, row.status) == ("GET", "invocations", 405)
