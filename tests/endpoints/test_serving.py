"""Model endpoints with real processes: Gantry under uvicorn, MLServer replicas in their
sandboxes (where this machine has one), a real HTTP client through the gateway.

The digits classifiers are scikit-learn models saved by MLflow and uploaded to the model
hub; requests are in the KServe v2 format (and MLflow's /invocations)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.utils import timezone

from accounts import services as account_services
from endpoints import local, services
from endpoints.models import Endpoint, ReplicaInterval
from modelhub import services as hub_services
from tests.endpoints.builders import (
    WAIT,
    gateway_call,
    train_digits_models,
    upload_mlflow_folder,
    use_data_folder,
)
from tests.faults.procs import Uvicorn

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(local.serving_python()).exists(),
        reason="no serving virtualenv (.venv-serving): make install builds it",
    ),
]



@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    folder = tmp_path_factory.mktemp("digits-models")
    sample = train_digits_models(folder)
    return folder, sample


@pytest.fixture
def world(transactional_db, settings, tmp_path, owner, member, outsider, project, digits):
    """A Gantry (uvicorn) over the test database and one data folder, the digits model
    with versions 1 and 2 and the alias `champion` on 1; every replica stopped afterwards."""
    data = tmp_path / "data"
    use_data_folder(settings, data)
    folder, sample = digits
    model = hub_services.create_model(owner, project, name="digits")
    v1 = upload_mlflow_folder(owner, model, folder / "v1")
    v2 = upload_mlflow_folder(owner, model, folder / "v2")
    hub_services.set_alias(owner, model, "champion", v1)
    web = Uvicorn(tmp_path, GANTRY_DATA_DIR=str(data))
    web.start()
    tokens = {
        user.username: account_services.create_api_token(actor=user, name="t", scope="write")[1]
        for user in (owner, member, outsider)
    }
    try:
        yield {
            "web": web,
            "model": model,
            "v1": v1,
            "v2": v2,
            "sample": sample,
            "tokens": tokens,
            "owner": owner,
            "project": project,
        }
    finally:
        from django.db import connection

        connection.close()
        web.stop()
        local.stop_all()


def infer_body(rows) -> dict:
    flat = [v for row in rows for v in row]
    return {
        "inputs": [{"name": "input-0", "shape": [len(rows), 64], "datatype": "FP64", "data": flat}]
    }


def call(world, endpoint, body, token=None, path=None):
    return gateway_call(world, endpoint, body, token or world["tokens"]["olivia"], path)


def wait_until(check, timeout=WAIT, step=0.2):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(step)


def test_the_digits_model_answers_through_the_gateway(world):
    endpoint = services.create_endpoint(
        world["owner"], world["project"], name="digits", model=world["model"], alias="champion"
    )
    rows, labels = world["sample"]["rows"], world["sample"]["labels"]

    first = call(world, endpoint, infer_body(rows))
    assert first.status_code == 200, first.text
    assert first.headers["Gantry-Model-Version"] == "v1"
    assert int(first.headers["Gantry-Cold-Start-Ms"]) > 0
    answer = first.json()
    assert answer["model_name"] == "digits" and answer["model_version"] == "v1"
    predicted = answer["outputs"][0]["data"]
    assert len(predicted) == 20
    assert sum(p == y for p, y in zip(predicted, labels, strict=True)) >= 16

    # MLflow's scoring protocol, translated by the gateway.
    mlflow = call(world, endpoint, {"inputs": rows[:3]}, path="invocations")
    assert mlflow.status_code == 200, mlflow.text
    assert mlflow.json() == {"predictions": predicted[:3]}
    assert "Gantry-Cold-Start-Ms" not in mlflow.headers

    # The protocol's other routes pass through.
    base = world["web"].url + endpoint.gateway_path
    auth = {"Authorization": f"Bearer {world['tokens']['olivia']}"}
    assert httpx.get(base + "v2/health/ready", headers=auth).status_code == 200
    assert httpx.get(base + "v2/models/digits", headers=auth).json()["name"] == "digits"

    # Nothing else of MLServer: its repository API would let a caller unload the model.
    unload = httpx.post(base + "v2/repository/models/digits/unload", headers=auth)
    assert unload.status_code == 404 and "inference paths" in unload.json()["error"]
    assert httpx.get(base + "v2/models/other", headers=auth).status_code == 404
    assert call(world, endpoint, infer_body(rows[:1])).status_code == 200

    # Bad payloads: 400 with the runtime's message, never 500.
    wrong_width = call(
        world,
        endpoint,
        {"inputs": [{"name": "input-0", "shape": [1, 3], "datatype": "FP64", "data": [1, 2, 3]}]},
    )
    assert wrong_width.status_code == 400
    assert "64 features" in wrong_width.json()["error"]
    not_protocol = call(world, endpoint, {"rows": [1]})
    assert not_protocol.status_code == 400 and "inputs" in not_protocol.text
    not_numbers = call(world, endpoint, {"inputs": [["a"] * 64]}, path="invocations")
    assert not_numbers.status_code == 400 and "number" in not_numbers.json()["error"]

    # The requests' log: statuses and timings, per version.
    def logged():
        return httpx.get(
            f"{world['web'].url}/api/v1/endpoints/{endpoint.pk}/requests/", headers=auth
        ).json()

    wait_until(lambda: len(logged()["requests"]) >= 7)
    log = logged()
    assert sorted(r["status"] for r in log["requests"]).count(400) == 3
    assert [v["version"] for v in log["versions"]] == [1]
    assert log["versions"][0]["requests"] >= 5 and log["versions"][0]["errors"] >= 2
    assert any(r["cold_start"] for r in log["requests"])


def gantry(world, tmp_path, *args):
    env = {**os.environ, "GANTRY_URL": world["web"].url, "GANTRY_TOKEN": world["tokens"]["olivia"]}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    return subprocess.run(
        [sys.executable, "-m", "gantry_cli", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT,
    )


def test_the_cli_creates_lists_calls_and_removes_an_endpoint(world, tmp_path):
    made = gantry(world, tmp_path, "endpoints", "create", "digits", "--model", "digits",
                  "--project", "lab-a/vision", "--alias", "champion", "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    endpoint = json.loads(made.stdout)
    assert endpoint["gateway_path"] == "/serve/lab-a/vision/digits/"
    again = gantry(world, tmp_path, "endpoints", "create", "digits", "--model", "digits",
                   "--project", "lab-a/vision", "--alias", "nosuch")  # fmt: skip
    assert again.returncode == 6 and "already has an endpoint" in again.stderr

    request = tmp_path / "request.json"
    request.write_text(json.dumps(infer_body(world["sample"]["rows"][:2])))
    answer = gantry(world, tmp_path, "predict", "lab-a/vision/digits", str(request))
    assert answer.returncode == 0, answer.stderr
    assert "answered by v1" in answer.stderr
    assert len(json.loads(answer.stdout)["outputs"][0]["data"]) == 2
    request.write_text(
        json.dumps({"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP64", "data": [1, 2]}]})
    )
    refused = gantry(world, tmp_path, "predict", "digits", str(request))
    assert refused.returncode == 6 and "64 features" in refused.stderr
    request.write_text("{not json")
    assert gantry(world, tmp_path, "predict", "digits", str(request)).returncode == 2

    listed = gantry(world, tmp_path, "endpoints", "ls", "--json")
    assert [e["name"] for e in json.loads(listed.stdout)] == ["digits"]
    wait_until(
        lambda: (
            len(
                json.loads(gantry(world, tmp_path, "endpoints", "logs", "digits", "--json").stdout)[
                    "requests"
                ]
            )
            >= 2
        )
    )
    removed = gantry(world, tmp_path, "endpoints", "rm", "digits", "--yes")
    assert removed.returncode == 0, removed.stderr
    assert not Endpoint.objects.filter(pk=endpoint["id"]).exists()
    wait_until(lambda: not local.running(local.Replica(endpoint["id"], world["v1"].pk)))


def test_access_outsiders_viewers_and_endpoint_tokens(world, client):
    endpoint = services.create_endpoint(
        world["owner"], world["project"], name="digits", model=world["model"], alias="champion"
    )
    other = services.create_endpoint(
        world["owner"], world["project"], name="other", model=world["model"], version=2
    )
    rows = world["sample"]["rows"][:1]
    tokens = world["tokens"]

    assert call(world, endpoint, infer_body(rows), token=tokens["oscar"]).status_code == 404
    assert (
        httpx.post(
            world["web"].url + endpoint.gateway_path + "v2/models/digits/infer", json={}
        ).status_code
        == 401
    )
    # A tenant member is a viewer of the project: may call, may not change.
    viewer = call(world, endpoint, infer_body(rows), token=tokens["max"])
    assert viewer.status_code == 200, viewer.text
    change = httpx.patch(
        f"{world['web'].url}/api/v1/endpoints/{endpoint.pk}/",
        json={"replicas": 2},
        headers={"Authorization": f"Bearer {tokens['max']}"},
    )
    assert change.status_code == 403
    endpoint.refresh_from_db()
    assert endpoint.replicas == 1

    _, secret = services.create_endpoint_token(world["owner"], endpoint, "another service")
    assert call(world, endpoint, infer_body(rows), token=secret).status_code == 200
    assert call(world, other, infer_body(rows), token=secret).status_code == 404
    assert call(world, endpoint, infer_body(rows), token=secret + "x").status_code == 401
    # The endpoint page's "try it": the signed-in session, with the page's CSRF token.
    client.force_login(world["owner"])
    url = world["web"].url + endpoint.gateway_path + "v2/models/digits/infer"
    with httpx.Client(cookies={"sessionid": client.cookies["sessionid"].value}) as browser:
        page = browser.get(f"{world['web'].url}/endpoints/{endpoint.pk}/")
        assert page.status_code == 200 and "Try it" in page.text
        assert browser.post(url, json=infer_body(rows)).status_code == 403  # no CSRF token
        tried = browser.post(
            url, json=infer_body(rows), headers={"X-CSRFToken": browser.cookies["csrftoken"]}
        )
        assert tried.status_code == 200, tried.text

    # A per-endpoint rate limit of one call a second: calls 50 ms apart (60 of them span
    # three seconds at least) see both answers; a refusal says why and when to retry.
    services.update_endpoint(world["owner"], endpoint, rate_limit=1)
    statuses = []
    for _ in range(60):
        answer = call(world, endpoint, infer_body(rows))
        statuses.append(answer.status_code)
        if answer.status_code == 429:
            assert answer.headers["Retry-After"] == "1" and "limit" in answer.json()["error"]
        if 200 in statuses and statuses.count(429) >= 3:
            break
        time.sleep(0.05)
    assert set(statuses) == {200, 429}, statuses

    # An endpoint token is no API token.
    api = httpx.get(
        f"{world['web'].url}/api/v1/endpoints/", headers={"Authorization": f"Bearer {secret}"}
    )
    assert api.status_code in (401, 403)


def test_an_alias_move_rolls_to_the_new_version_without_a_failed_request(world):
    # No rate limit: the client loop alone passes the default 100 requests a second.
    endpoint = services.create_endpoint(
        world["owner"], world["project"], name="digits", model=world["model"],
        alias="champion", rate_limit=0,
    )  # fmt: skip
    body = infer_body(world["sample"]["rows"][:2])
    assert call(world, endpoint, body).headers["Gantry-Model-Version"] == "v1"

    answers: list[tuple[int, str]] = []
    failures: list[str] = []
    stop = threading.Event()

    def client_loop():
        with httpx.Client(timeout=WAIT) as http:
            url = world["web"].url + endpoint.gateway_path + "v2/models/digits/infer"
            headers = {"Authorization": f"Bearer {world['tokens']['olivia']}"}
            while not stop.is_set():
                try:
                    response = http.post(url, json=body, headers=headers)
                except httpx.HTTPError as exc:
                    failures.append(repr(exc))
                    continue
                if response.status_code != 200:
                    failures.append(f"{response.status_code} {response.text[:200]}")
                answers.append(
                    (response.status_code, response.headers.get("Gantry-Model-Version", ""))
                )

    thread = threading.Thread(target=client_loop)
    thread.start()
    try:
        wait_until(lambda: len(answers) >= 5)
        hub_services.set_alias(world["owner"], world["model"], "champion", world["v2"])
        # The new version answers, steadily, once its replica is ready and traffic switched.
        wait_until(lambda: [v for _, v in answers[-20:]] == ["v2"] * 20 and len(answers) > 40)
    finally:
        stop.set()
        thread.join(timeout=WAIT)
    assert failures == []
    versions = [v for _, v in answers]
    assert "v1" in versions and versions[-1] == "v2"
    # Once switched, the old version never answers again.
    assert "v1" not in versions[versions.index("v2") :]
    endpoint.refresh_from_db()
    assert endpoint.serving_version_id == world["v2"].pk
    # The old replica is drained and stopped; the new one outlives the roll that started it.
    wait_until(lambda: not local.running(local.Replica(endpoint.pk, world["v1"].pk)))
    time.sleep(1)  # the roll's thread has ended by now
    assert local.running(local.Replica(endpoint.pk, world["v2"].pk))
    after = call(world, endpoint, body)
    assert after.headers["Gantry-Model-Version"] == "v2"
    assert "Gantry-Cold-Start-Ms" not in after.headers


def test_a_canary_alias_takes_its_share_and_says_so(world):
    hub_services.set_alias(world["owner"], world["model"], "challenger", world["v2"])
    endpoint = services.create_endpoint(
        world["owner"],
        world["project"],
        name="digits",
        model=world["model"],
        alias="champion",
        canary_alias="challenger",
        canary_percent=20,
        rate_limit=0,  # 500 calls in a row pass the default 100 a second
    )
    body = infer_body(world["sample"]["rows"][:1])
    seen = {"v1": 0, "v2": 0}
    with httpx.Client(timeout=WAIT) as http:
        url = world["web"].url + endpoint.gateway_path + "v2/models/digits/infer"
        headers = {"Authorization": f"Bearer {world['tokens']['olivia']}"}
        for _ in range(500):
            response = http.post(url, json=body, headers=headers)
            assert response.status_code == 200, response.text
            version = response.headers["Gantry-Model-Version"]
            assert (version == "v2") == (response.headers.get("Gantry-Canary") == "true")
            seen[version] += 1
    # 20% of 500 is 100; the standard deviation of the count is about 9: five of them.
    assert 55 <= seen["v2"] <= 145, seen


def test_an_idle_endpoint_scales_to_zero_and_comes_back(world, client, outsider):
    endpoint = services.create_endpoint(
        world["owner"],
        world["project"],
        name="digits",
        model=world["model"],
        alias="champion",
        idle_seconds=2,
    )
    body = infer_body(world["sample"]["rows"][:1])
    assert call(world, endpoint, body).status_code == 200
    answered = timezone.now()
    replica = local.Replica(endpoint.pk, world["v1"].pk)
    assert local.running(replica)
    (ran,) = ReplicaInterval.objects.all()  # the usage report's record, from its start
    assert (ran.replica, ran.ended_at) == (replica.name, None)
    # The cluster page lists what the running endpoint holds; an outsider's does not.
    client.force_login(world["owner"])
    assert b"lab-a/vision/digits" in client.get("/cluster/").content
    client.force_login(outsider)
    assert b"lab-a/vision/digits" not in client.get("/cluster/").content
    wait_until(lambda: not local.running(replica))  # it stopped itself after 2 idle seconds
    stopped = timezone.now()
    client.force_login(world["owner"])
    assert b"lab-a/vision/digits" not in client.get("/cluster/").content
    # The minute's pass ends its interval when the replica stopped, not when the pass came.
    assert local.record_replicas(now=stopped + timedelta(minutes=1))["closed"] == 1
    ran.refresh_from_db()
    assert answered + timedelta(seconds=1.5) < ran.ended_at <= stopped

    back = call(world, endpoint, body)
    assert back.status_code == 200, back.text
    assert int(back.headers["Gantry-Cold-Start-Ms"]) > 0
    assert local.running(replica)
    endpoint = Endpoint.objects.get(pk=endpoint.pk)
    assert endpoint.last_cold_start_ms > 0
    assert ReplicaInterval.objects.filter(ended_at=None).exclude(pk=ran.pk).count() == 1


def test_a_model_that_cannot_load_answers_503_with_the_reason(world):
    from django.core.files.uploadedfile import SimpleUploadedFile

    from tests.endpoints.builders import MLMODEL

    broken = hub_services.upload_version(
        world["owner"],
        world["model"],
        [
            ("MLmodel", SimpleUploadedFile("MLmodel", MLMODEL)),
            ("model.pkl", SimpleUploadedFile("model.pkl", b"not a pickle")),
        ],
    )
    endpoint = services.create_endpoint(
        world["owner"], world["project"], name="broken", model=world["model"], version=broken.number
    )
    answer = call(world, endpoint, infer_body(world["sample"]["rows"][:1]))
    assert answer.status_code == 503
    assert "could not start" in answer.json()["error"]
    endpoint.refresh_from_db()
    assert endpoint.state == "failed" and endpoint.state_reason.startswith(f"v{broken.number}:")
    assert not local.running(local.Replica(endpoint.pk, broken.pk))
    # The next call is told at once, without starting another server that would fail.
    log = local.Replica(endpoint.pk, broken.pk).run_dir / "replica.log"
    size = log.stat().st_size
    again = call(world, endpoint, infer_body(world["sample"]["rows"][:1]))
    assert again.status_code == 503 and "tried again in" in again.json()["error"]
    assert log.stat().st_size == size
