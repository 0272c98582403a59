"""Gantry's registry client against a real registry (Debian's docker-registry)."""

import json

import httpx
import pytest

from images.registry import (
    DOCKER_MANIFEST,
    OCI_MANIFEST,
    RegistryAuthError,
    RegistryClient,
    RegistryNotConfigured,
    RegistryNotFound,
    RegistryUnavailable,
)
from tests.registry import PASSWORD, USERNAME


@pytest.fixture
def client(registry):
    with RegistryClient(registry.url, USERNAME, PASSWORD) as client:
        yield client


@pytest.fixture(scope="module")
def pushed(registry):
    registry.push_tiny_image("client/tiny", "1.0", labels={"org.gantry.framework": "pytorch"})
    registry.push_tiny_image("client/tiny", "1.1")
    registry.push_tiny_image("client/dockerv2", "1", docker_v2=True)
    return registry


def test_it_lists_repositories_and_tags(client, pushed):
    assert {"client/tiny", "client/dockerv2"} <= set(client.repositories())
    assert client.tags("client/tiny") == ["1.0", "1.1"]


def test_resolving_a_tag_gives_the_digest_skopeo_sees(client, pushed):
    assert client.resolve("client/tiny", "1.0") == pushed.skopeo_digest("client/tiny", "1.0")


def test_it_reads_oci_and_docker_v2_manifests(client, pushed):
    oci = client.manifest("client/tiny", "1.0")
    assert oci.media_type == OCI_MANIFEST and len(oci.layers) == 1
    assert oci.digest == client.resolve("client/tiny", "1.0")
    docker = client.manifest("client/dockerv2", "1")
    assert docker.media_type == DOCKER_MANIFEST
    # By digest too, which is how a pinned image is read.
    assert client.manifest("client/tiny", oci.digest).body == oci.body


def test_it_reads_image_labels_from_the_config_blob(client, pushed):
    assert client.labels("client/tiny", "1.0") == {"org.gantry.framework": "pytorch"}
    assert "LANG=C.UTF-8" in client.config("client/tiny", "1.1")["config"]["Env"]


def test_a_missing_tag_or_repository_is_not_found(client, pushed):
    with pytest.raises(RegistryNotFound, match="client/tiny:nope"):
        client.resolve("client/tiny", "nope")
    with pytest.raises(RegistryNotFound):
        client.tags("client/never-pushed")


def test_wrong_credentials_are_an_auth_error(registry, pushed):
    with (
        RegistryClient(registry.url, USERNAME, "wrong") as client,
        pytest.raises(RegistryAuthError, match="refused access as 'gantry'"),
    ):
        client.tags("client/tiny")
    with (
        RegistryClient(registry.url) as client,
        pytest.raises(RegistryAuthError, match="no credentials"),
    ):
        client.repositories()


def test_deleting_a_manifest_by_digest_removes_the_tag(client, registry):
    registry.push_tiny_image("client/doomed", "1")
    digest = client.resolve("client/doomed", "1")
    client.delete_manifest("client/doomed", digest)
    with pytest.raises(RegistryNotFound):
        client.manifest("client/doomed", digest)
    assert client.tags("client/doomed") == []


def test_nothing_listening_is_unavailable():
    with (
        RegistryClient("http://127.0.0.1:9", timeout=2) as client,
        pytest.raises(RegistryUnavailable),
    ):
        client.ping()


def test_no_registry_configured_says_so():
    with pytest.raises(RegistryNotConfigured, match="GANTRY_REGISTRY_URL"):
        RegistryClient("")


def test_the_bearer_token_dance():
    """A registry behind a token service (Docker Hub, Harbor, GitLab): 401 with a Bearer
    challenge, a token from the realm for the scope, then the retry with it."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.host == "auth.example":
            assert request.url.params["scope"] == "repository:team/app:pull"
            assert request.url.params["service"] == "registry.example"
            assert request.headers["Authorization"].startswith("Basic ")
            return httpx.Response(200, json={"token": "t0ken"})
        if request.headers.get("Authorization") != "Bearer t0ken":
            return httpx.Response(
                401,
                headers={
                    "WWW-Authenticate": 'Bearer realm="https://auth.example/token",'
                    'service="registry.example",scope="repository:team/app:pull"'
                },
            )
        return httpx.Response(200, json={"name": "team/app", "tags": ["b", "a"]})

    with RegistryClient(
        "https://registry.example", "u", "p", transport=httpx.MockTransport(handler)
    ) as client:
        assert client.tags("team/app") == ["a", "b"]
        assert client.tags("team/app") == ["a", "b"]  # the token is reused
    assert [r.url.host for r in seen] == [
        "registry.example",
        "auth.example",
        "registry.example",
        "registry.example",
    ]


def test_a_refused_token_request_is_an_auth_error():
    def handler(request):
        if request.url.host == "auth.example":
            return httpx.Response(401)
        return httpx.Response(
            401, headers={"WWW-Authenticate": 'Bearer realm="https://auth.example/token"'}
        )

    with (
        RegistryClient(
            "https://registry.example", "u", "bad", transport=httpx.MockTransport(handler)
        ) as client,
        pytest.raises(RegistryAuthError, match="token service refused"),
    ):
        client.repositories()


def test_a_manifest_without_a_digest_header_is_hashed():
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode()

    def handler(request):
        return httpx.Response(200, content=body, headers={"Content-Type": OCI_MANIFEST})

    with RegistryClient("https://r.example", transport=httpx.MockTransport(handler)) as client:
        manifest = client.manifest("a/b", "1")
        assert client.resolve("a/b", "1") == manifest.digest
    import hashlib

    assert manifest.digest == "sha256:" + hashlib.sha256(body).hexdigest()
