"""Creating and changing endpoints: bad input gets a clear message and changes nothing;
only developers and up may; the API says the same (no model server runs here)."""

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile

from endpoints import services
from endpoints.models import Endpoint, EndpointToken
from modelhub import services as hub_services
from tests.endpoints.builders import MLMODEL
from tests.modelhub.builders import safetensors_bytes


@pytest.fixture
def model(owner, project):
    model = hub_services.create_model(owner, project, name="digits")
    files = [
        ("MLmodel", SimpleUploadedFile("MLmodel", MLMODEL)),
        ("model.pkl", SimpleUploadedFile("model.pkl", b"pickle")),
    ]
    version = hub_services.upload_version(owner, model, files)
    hub_services.set_alias(owner, model, "champion", version)
    hub_services.upload_version(
        owner, model, [("model.safetensors", SimpleUploadedFile("m", safetensors_bytes()))]
    )
    return model


def refused(field, *args, **kwargs):
    with pytest.raises(ValidationError) as caught:
        services.create_endpoint(*args, **kwargs)
    assert field in caught.value.message_dict, caught.value.message_dict
    return " ".join(caught.value.message_dict[field])


def test_an_endpoint_follows_an_alias_or_serves_a_version(owner, project, model):
    by_alias = services.create_endpoint(
        owner, project, name="digits", model=model, alias="champion"
    )
    assert (by_alias.alias, by_alias.version) == ("champion", None)
    assert by_alias.gateway_path == "/serve/lab-a/vision/digits/"
    fixed = services.create_endpoint(owner, project, name="pinned", model=model, version=1)
    assert (fixed.alias, fixed.version.number) == ("", 1)
    primary, canary = services.wanted_versions(fixed)
    assert (primary.number, canary) == (1, None)


def test_bad_input_is_refused_with_a_message_and_creates_nothing(owner, project, model):
    assert "lowercase" in refused(
        "name", owner, project, name="Digits Model", model=model, alias="champion"
    )
    assert "not both" in refused(
        "alias", owner, project, name="a", model=model, alias="champion", version=1
    )
    assert "not both" in refused("alias", owner, project, name="a", model=model)
    assert "its aliases: champion" in refused(
        "alias", owner, project, name="a", model=model, alias="prod"
    )
    assert "no version 9" in refused("version", owner, project, name="a", model=model, version=9)
    assert "safetensors" in refused("version", owner, project, name="a", model=model, version=2)
    assert "1 to 16" in refused(
        "replicas", owner, project, name="a", model=model, alias="champion", replicas=0
    )
    assert "share" in refused(
        "canary_percent",
        owner,
        project,
        name="a",
        model=model,
        alias="champion",
        canary_alias="champion",
    )
    assert "GPU" in refused("gpus", owner, project, name="a", model=model, alias="champion", gpus=1)
    assert Endpoint.objects.count() == 0


def test_a_second_endpoint_of_the_same_name_is_refused(owner, project, model):
    services.create_endpoint(owner, project, name="digits", model=model, alias="champion")
    assert "already has" in refused("name", owner, project, name="digits", model=model, version=1)


def test_viewers_may_not_create_change_or_hand_out_tokens(owner, member, project, model):
    with pytest.raises(PermissionDenied):
        services.create_endpoint(member, project, name="digits", model=model, alias="champion")
    endpoint = services.create_endpoint(
        owner, project, name="digits", model=model, alias="champion"
    )
    with pytest.raises(PermissionDenied):
        services.update_endpoint(member, endpoint, replicas=2)
    with pytest.raises(PermissionDenied):
        services.create_endpoint_token(member, endpoint, "mine")
    assert EndpointToken.objects.count() == 0
    endpoint.refresh_from_db()
    assert endpoint.replicas == 1


def test_an_update_that_fails_changes_nothing(owner, project, model):
    endpoint = services.create_endpoint(
        owner, project, name="digits", model=model, alias="champion"
    )
    with pytest.raises(ValidationError):
        services.update_endpoint(
            owner, endpoint, replicas=3, canary_alias="nosuch", canary_percent=10
        )
    endpoint.refresh_from_db()
    assert (endpoint.replicas, endpoint.canary_alias, endpoint.canary_percent) == (1, "", 0)


def test_an_endpoint_token_is_stored_hashed_and_shown_once(owner, project, model):
    endpoint = services.create_endpoint(
        owner, project, name="digits", model=model, alias="champion"
    )
    token, secret = services.create_endpoint_token(owner, endpoint, "another service")
    assert secret.startswith("gep_") and secret not in (token.key_hash, token.key_prefix)
    assert token.key_hash == services.hash_secret(secret)


def test_the_api_refuses_bad_input_with_400_and_viewers_with_403(
    owner, member, project, model, api_for
):
    api = api_for(owner)
    body = {"project": project.pk, "model": model.pk, "name": "digits", "alias": "prod"}
    answer = api.post("/api/v1/endpoints/", body, format="json")
    assert answer.status_code == 400 and "alias" in answer.json()
    assert (
        api.post("/api/v1/endpoints/", {**body, "model": 2**62}, format="json").status_code == 400
    )
    made = api.post("/api/v1/endpoints/", {**body, "alias": "champion"}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["state"] == "scaled-to-zero"
    change = api_for(member).patch(
        f"/api/v1/endpoints/{made.json()['id']}/", {"replicas": 2}, format="json"
    )
    assert change.status_code == 403
    viewer_create = api_for(member).post(
        "/api/v1/endpoints/", {**body, "name": "x", "alias": "champion"}, format="json"
    )
    assert viewer_create.status_code == 403
    listed = api_for(member).get("/api/v1/endpoints/").json()
    assert [e["name"] for e in listed.get("results", listed)] == ["digits"]
    token = api.post(
        f"/api/v1/endpoints/{made.json()['id']}/tokens/", {"name": "svc"}, format="json"
    )
    assert token.status_code == 201 and token.json()["secret"].startswith("gep_")


def test_the_endpoint_list_reads_a_page_in_a_fixed_number_of_queries(
    owner, project, model, client, django_assert_max_num_queries
):
    client.force_login(owner)
    services.create_endpoint(owner, project, name="e0", model=model, alias="champion")
    client.get("/endpoints/")  # the user's access, read once per session
    with django_assert_max_num_queries(12) as few:
        assert client.get("/endpoints/").status_code == 200
    for i in range(1, 8):
        services.create_endpoint(owner, project, name=f"e{i}", model=model, version=1)
    with django_assert_max_num_queries(len(few.captured_queries)):
        page = client.get("/endpoints/")
    assert page.status_code == 200 and page.content.count(b"/endpoints/") >= 8


def test_the_page_gives_an_endpoint_token_once_and_viewers_none(
    owner, member, project, model, client
):
    endpoint = services.create_endpoint(
        owner, project, name="digits", model=model, alias="champion"
    )
    url = f"/endpoints/{endpoint.pk}/tokens/new/"
    client.force_login(member)
    assert client.post(url, {"name": "svc"}).status_code == 403
    client.force_login(owner)
    assert client.post(url, {"name": ""}).status_code == 400
    answer = client.post(url, {"name": "svc"})
    assert answer.status_code == 200 and answer["Cache-Control"] == "no-store"
    token = EndpointToken.objects.get(endpoint=endpoint)
    secret = answer.content.decode().split('id="endpoint-secret">')[1].split("<")[0]
    assert services.hash_secret(secret) == token.key_hash
    assert secret not in client.get(f"/endpoints/{endpoint.pk}/").content.decode()
