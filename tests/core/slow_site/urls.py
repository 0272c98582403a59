import asyncio
import os
from pathlib import Path

from django.http import HttpResponse
from django.urls import include, path


async def wait_for_gate(request):
    """Answers once the file $GANTRY_TEST_GATE exists: as long as the test wants. Leaves
    a file beside it on entry, so the test knows the request is in the view."""
    gate = Path(os.environ["GANTRY_TEST_GATE"])
    (gate.parent / f"entered-{id(request)}").touch()
    while not gate.exists():
        await asyncio.sleep(0.05)
    return HttpResponse("opened")


urlpatterns = [
    path("slow/", wait_for_gate),
    path("", include("config.urls")),
]
