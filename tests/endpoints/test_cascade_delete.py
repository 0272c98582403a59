"""The gateway's traffic flush and the delete of an endpoint's project, tenant or model at
the same moment, as two web processes may do them. The delete cascades to the endpoint
and its request log; held in the middle of that cascade (the log deleted, the endpoint's
row not yet touched), it meets a flush writing to the endpoint's log. On PostgreSQL the delete locked
the endpoint before its cascade (core.registry.before_cascade), so the flush waits for
the commit and leaves the endpoint out; unlocked, the flush's row broke the delete's
commit on the foreign key. SQLite serializes the two."""

import signal
import threading
import time

import pytest
from django.db import connection

from accounts import services as account_services
from endpoints import traffic
from endpoints.models import Endpoint, EndpointRequest
from modelhub import services as hub_services
from projects import services as project_services
from tests.endpoints.builders import access_objects

pytestmark = pytest.mark.django_db(transaction=True)

DELETES = {
    "project": lambda owner, e: project_services.delete_project(actor=owner, project=e.project),
    "tenant": lambda owner, e: account_services.delete_tenant(actor=owner, tenant=e.tenant),
    "model": lambda owner, e: hub_services.delete_model(owner, e.model),
}


@pytest.mark.parametrize("what", DELETES)
def test_a_flush_meeting_the_cascade_of_a_delete_leaves_the_endpoint_out(
    what, project, owner, monkeypatch
):
    endpoint = access_objects(project, owner)[Endpoint]
    endpoint = Endpoint.objects.select_related("project__tenant", "model").get(pk=endpoint.pk)
    monkeypatch.setattr(traffic, "FLUSH_SECONDS", 60.0)  # this test flushes, not a timer
    traffic.flush()
    traffic.record(endpoint.pk, None, False, "POST", "v2/x", 404, time.perf_counter(), False)
    cascading, release, failed = threading.Event(), threading.Event(), []

    def hold_after_the_log_goes(execute, sql, params, many, context):
        result = execute(sql, params, many, context)
        if sql.startswith('DELETE FROM "endpoints_endpointrequest" '):
            cascading.set()  # the endpoint's row is neither updated nor deleted yet
            release.wait(10)
        return result

    def delete_elsewhere():
        try:
            with connection.execute_wrapper(hold_after_the_log_goes):
                DELETES[what](owner, endpoint)
        except Exception as exc:
            failed.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=delete_elsewhere)
    thread.start()
    try:
        assert cascading.wait(10)
        threading.Timer(0.5, release.set).start()
        assert traffic.flush() == 1  # waited for the delete, or tried again after it
    finally:
        release.set()
        thread.join(10)
    assert not failed, failed
    assert not Endpoint.objects.filter(pk=endpoint.pk).exists()
    assert not EndpointRequest.objects.exists()


@pytest.mark.parametrize("what", DELETES)
def test_deleting_what_an_endpoint_belongs_to_stops_its_replicas(what, project, owner, start_replicas):
    endpoint = access_objects(project, owner)[Endpoint]
    endpoint = Endpoint.objects.select_related("project__tenant", "model").get(pk=endpoint.pk)
    (process,) = start_replicas(endpoint, 1).values()
    DELETES[what](owner, endpoint)
    assert process.wait(10) == -signal.SIGTERM  # at the commit, not after their idle time
