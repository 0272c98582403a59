"""The gateway's traffic flush and an endpoint's delete at the same moment, as two web
processes may do them: the flush leaves the deleted endpoint out, the delete leaves no
row of its log behind, and neither fails (on PostgreSQL the rows are locked; on SQLite
the flush tries again without the endpoint its foreign key refused)."""

import threading
import time

import pytest
from django.db import connection, transaction

from endpoints import traffic
from endpoints.models import Endpoint, EndpointRequest
from tests.endpoints.builders import access_objects

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_flush_meeting_a_delete_under_way_leaves_that_endpoint_out(
    project, owner, monkeypatch
):
    endpoint = access_objects(project, owner)[Endpoint]
    monkeypatch.setattr(traffic, "FLUSH_SECONDS", 60.0)  # this test flushes, not a timer
    traffic.flush()
    traffic.record(endpoint.pk, None, False, "POST", "v2/x", 404, time.perf_counter(), False)
    deleted, release = threading.Event(), threading.Event()

    def delete_elsewhere():
        try:
            with transaction.atomic():
                Endpoint.objects.filter(pk=endpoint.pk).delete_locked()
                deleted.set()
                release.wait(10)  # not committed yet while the flush starts
        finally:
            connection.close()

    thread = threading.Thread(target=delete_elsewhere)
    thread.start()
    try:
        assert deleted.wait(10)
        threading.Timer(0.5, release.set).start()
        assert traffic.flush() == 1  # waited for the delete, or tried again after it
    finally:
        release.set()
        thread.join(10)
    assert not Endpoint.objects.filter(pk=endpoint.pk).exists()
    assert not EndpointRequest.objects.exists()
