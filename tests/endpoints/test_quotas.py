"""Endpoints count in their tenant's quota like jobs: what their running replicas hold is
part of the tenant's holdings (admission, the cluster and home pages), and creating or
scaling an endpoint past the quota is refused with a message, changing nothing.

No model server runs here: a replica is a real process (`sleep`) with the pid file the
local backend's replicas have, which is how every Gantry process finds them
(`start_replicas`, tests/endpoints/conftest.py)."""

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile

from endpoints import local, rollout, services
from endpoints.models import Endpoint
from jobs.compute import reset_backends
from jobs.models import Job
from jobs.services.holdings import holdings_by_tenant
from jobs.services.submit import submit_job
from modelhub import services as hub_services
from scheduling.admission import admission_pass
from scheduling.services import set_tenant_quota
from tests.endpoints.builders import MLMODEL

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def machine(settings, tmp_path):
    """One machine of 8 CPUs and 16 GiB (no GPUs); replicas' pid files under tmp_path."""
    settings.GANTRY_JOBS_DIR = tmp_path / "jobs"
    settings.GANTRY_LOCAL_FAKE_GPUS = 0
    settings.GANTRY_LOCAL_CPUS = 8
    settings.GANTRY_LOCAL_MEMORY_MB = 16384
    reset_backends()
    yield
    reset_backends()


@pytest.fixture
def version(owner, project):
    model = hub_services.create_model(owner, project, name="digits")
    files = [
        ("MLmodel", SimpleUploadedFile("MLmodel", MLMODEL)),
        ("model.pkl", SimpleUploadedFile("model.pkl", b"pickle")),
    ]
    version = hub_services.upload_version(owner, model, files)
    hub_services.set_alias(owner, model, "champion", version)
    return version


def endpoint_of(owner, project, version, **fields):
    return services.create_endpoint(
        owner, project, name=fields.pop("name", "digits"), model=version.model,
        alias="champion", **fields,
    )  # fmt: skip


def cpu_quota(owner, tenant, cpus):
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=0, borrow_limit_gpus=0,
                     max_cpus=cpus)  # fmt: skip


def submit(owner, project, **spec):
    return submit_job(owner, project, command="python -c pass", memory_mb=256, **spec)


def test_a_job_waits_while_its_tenants_endpoint_holds_the_cpu_quota(
    owner, tenant, project, version, start_replicas
):
    cpu_quota(owner, tenant, 4)
    endpoint = endpoint_of(owner, project, version, replicas=2, cpus=2)
    start_replicas(endpoint, 2)
    job = submit(owner, project, cpus=1)

    assert admission_pass() == []
    job = Job.objects.get(pk=job.pk)
    assert job.state == "queued"
    assert job.state_reason == "waiting for 1 CPUs; tenant lab-a uses 4 of its 4 CPU limit"

    local.stop_all(endpoint.pk)  # scaled to zero: the replicas hold nothing any more
    assert admission_pass() == [job]


def test_a_tenants_endpoint_replicas_take_room_on_the_machine(
    owner, tenant, project, version, start_replicas
):
    endpoint = endpoint_of(owner, project, version, replicas=3, cpus=2)
    start_replicas(endpoint, 3)  # 6 of the machine's 8 CPUs; the tenant has no quota
    job = submit(owner, project, cpus=4)

    assert admission_pass() == []
    assert Job.objects.get(pk=job.pk).state_reason == ("waiting for 4 CPUs: 2 free on this machine")
    local.stop_all(endpoint.pk)
    assert admission_pass() == [job]


def test_an_endpoint_is_not_counted_as_one_of_the_tenants_jobs(
    owner, tenant, project, version, start_replicas
):
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=0, borrow_limit_gpus=0,
                     max_jobs=1)  # fmt: skip
    start_replicas(endpoint_of(owner, project, version), 1)
    first, second = submit(owner, project, cpus=1), submit(owner, project, cpus=1)

    assert admission_pass() == [first]
    assert Job.objects.get(pk=second.pk).state_reason == "tenant lab-a already runs 1 of its 1 jobs"


def test_an_endpoints_gpus_take_the_guarantee_before_the_tenants_jobs(
    owner, tenant, project, version, start_replicas, settings
):
    settings.GANTRY_LOCAL_FAKE_GPUS = 4
    reset_backends()
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=1, borrow_limit_gpus=1)
    endpoint = endpoint_of(owner, project, version)
    Endpoint.objects.filter(pk=endpoint.pk).update(gpus=1)  # as a Kubernetes endpoint may
    start_replicas(endpoint, 1)
    first, second = submit(owner, project, gpus=1), submit(owner, project, gpus=1)

    assert admission_pass() == [first]
    assert "borrowed beyond lab-a's guarantee" in Job.objects.get(pk=first.pk).state_reason
    assert Job.objects.get(pk=second.pk).state_reason.startswith(
        "waiting for 1 GPU; tenant lab-a uses 2 of its 1 guaranteed GPUs and may borrow at "
        "most 1 more"
    )


def test_an_endpoint_on_borrowed_gpus_is_never_preempted(
    owner,
    outsider,
    tenant,
    other_tenant,
    project,
    other_project,
    version,
    start_replicas,
    settings,
):
    settings.GANTRY_LOCAL_FAKE_GPUS = 4
    reset_backends()
    set_tenant_quota(actor=owner, tenant=tenant, guaranteed_gpus=0, borrow_limit_gpus=4)
    set_tenant_quota(actor=outsider, tenant=other_tenant, guaranteed_gpus=4, borrow_limit_gpus=0)
    endpoint = endpoint_of(owner, project, version)
    Endpoint.objects.filter(pk=endpoint.pk).update(gpus=4)
    start_replicas(endpoint, 1)  # all four GPUs, borrowed from lab-b's guarantee
    theirs = submit(outsider, other_project, gpus=1)

    assert admission_pass() == []  # a job of lab-b would reclaim them; a replica is not a job
    assert Job.objects.get(pk=theirs.pk).state_reason.startswith("waiting for 1 GPU; 0 free")


def test_holdings_are_jobs_and_endpoint_replicas_together(
    owner, tenant, project, version, start_replicas
):
    endpoint = endpoint_of(owner, project, version, replicas=2, cpus=3, memory_mb=2048)
    start_replicas(endpoint, 2)
    submit(owner, project, cpus=1)
    admission_pass()

    held = holdings_by_tenant([tenant.pk])[tenant.pk]
    assert (held["cpus"], held["memory_mb"], held["jobs"]) == (7, 4096 + 256, 1)
    assert held["services"] == {"gpus": 0, "cpus": 6, "memory_mb": 4096, "replicas": 2}


def test_creating_an_endpoint_past_the_quota_is_refused_and_creates_nothing(
    owner, tenant, project, version, client
):
    cpu_quota(owner, tenant, 4)
    submit(owner, project, cpus=2)
    assert len(admission_pass()) == 1  # the job holds 2 of the 4 CPUs

    with pytest.raises(ValidationError) as caught:
        endpoint_of(owner, project, version, replicas=2, cpus=2)
    assert caught.value.message_dict["replicas"] == [
        "2 replicas × 2 CPUs need 4 CPUs, but tenant lab-a may hold at most 4 CPUs and holds "
        "2 CPUs now (2 CPUs by jobs, 0 CPUs by other endpoints); use fewer or smaller "
        "replicas, or ask an administrator for a larger quota."
    ]
    # A canary runs replicas of its own: two of one CPU each per version do not fit either.
    with pytest.raises(ValidationError, match="primary and canary"):
        endpoint_of(owner, project, version, replicas=2, cpus=1, canary_alias="champion",
                    canary_percent=10)  # fmt: skip
    assert not Endpoint.objects.exists()

    client.force_login(owner)
    form = {"name": "digits", "alias": "champion", "canary_percent": 0, "replicas": 3,
            "cpus": 1, "memory_mb": 1024, "idle_seconds": 900, "rate_limit": 100}  # fmt: skip
    page = client.post(f"/model-versions/{version.pk}/deploy/", form)
    assert page.status_code == 400
    assert "3 replicas × 1 CPU need 3 CPUs" in page.content.decode()
    assert not Endpoint.objects.exists()

    assert endpoint_of(owner, project, version, replicas=2, cpus=1).replicas == 2


def test_scaling_an_endpoint_past_the_quota_is_refused_and_changes_nothing(
    owner, tenant, project, version, start_replicas, api_for
):
    cpu_quota(owner, tenant, 4)
    endpoint = endpoint_of(owner, project, version, replicas=1, cpus=2)
    start_replicas(endpoint, 1)

    with pytest.raises(ValidationError) as caught:
        services.update_endpoint(owner, endpoint, replicas=3)
    assert "3 replicas × 2 CPUs need 6 CPUs" in caught.value.message_dict["replicas"][0]
    answer = api_for(owner).patch(f"/api/v1/endpoints/{endpoint.pk}/", {"cpus": 5}, format="json")
    assert answer.status_code == 400
    assert "1 replica × 5 CPUs need 5 CPUs" in answer.json()["cpus"][0]
    endpoint.refresh_from_db()
    assert (endpoint.replicas, endpoint.cpus) == (1, 2)

    # Its own running replica is replaced, not added to: two of 2 CPUs fit in 4.
    assert services.update_endpoint(owner, endpoint, replicas=2).replicas == 2
    # Other changes are not refused while the tenant is over its quota.
    cpu_quota(owner, tenant, 1)
    assert services.update_endpoint(owner, endpoint, rate_limit=5).rate_limit == 5


def test_a_cold_start_past_the_quota_is_refused_with_the_quotas_message(
    owner, tenant, project, version
):
    # Created while the tenant held nothing; by its first request (or its first after
    # scaling to zero) a job holds 3 of the 4 CPUs: its 2 CPUs are not started.
    cpu_quota(owner, tenant, 4)
    endpoint = endpoint_of(owner, project, version, replicas=1, cpus=2)
    submit(owner, project, cpus=3)
    assert len(admission_pass()) == 1

    with pytest.raises(local.ReplicaError) as caught:
        rollout.route(endpoint)
    reason = (
        "v1 not started: 1 replica × 2 CPUs need 2 CPUs, but tenant lab-a may hold at most "
        "4 CPUs and holds 3 CPUs now (3 CPUs by jobs, 0 CPUs by other endpoints); use fewer "
        "or smaller replicas, or ask an administrator for a larger quota."
    )
    assert str(caught.value) == reason
    assert not local.all_replicas()  # nothing was started
    endpoint.refresh_from_db()
    assert endpoint.state_reason == reason
    assert endpoint.serving_version is None


def test_the_cluster_and_home_pages_show_what_endpoints_hold(
    owner, tenant, project, version, start_replicas, client
):
    cpu_quota(owner, tenant, 8)
    endpoint = endpoint_of(owner, project, version, replicas=2, cpus=3, memory_mb=2048)
    Endpoint.objects.filter(pk=endpoint.pk).update(gpus=1)  # as a Kubernetes endpoint may
    start_replicas(endpoint, 2)
    client.force_login(owner)

    cluster = client.get("/cluster/").content.decode()
    assert 'data-endpoint-replicas="2"' in cluster
    assert 'data-endpoint-cpus="6"' in cluster
    assert 'data-endpoint-memory-mb="4096"' in cluster
    assert "2 in use (jobs 0 + endpoints 2)" in cluster
    home = client.get("/").content.decode()
    assert 'data-gpus-in-use="2"' in home and "2 in use by model endpoints" in home
