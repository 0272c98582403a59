"""A client for the OCI Distribution API (Docker Registry HTTP API v2).

It speaks to one registry: lists repositories and tags, reads manifests (OCI
and Docker v2, indexes and single-platform), resolves tags to digests, reads
config blobs (labels), pushes blobs and manifests (custom image builds) and
deletes manifests. Authentication follows the registry's `WWW-Authenticate`
challenge: HTTP Basic (htpasswd), or the Bearer token dance (ask the realm for
a token for the scope, then retry with it).

Errors are RegistryError subclasses with messages meant for users; nothing
here touches the database.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
ACCEPT = ", ".join(MANIFEST_TYPES)
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"


class RegistryError(Exception):
    """Something went wrong talking to the registry; str() is a user-facing message."""


class RegistryUnavailable(RegistryError):
    pass


class RegistryAuthError(RegistryError):
    pass


class RegistryNotFound(RegistryError):
    pass


class RegistryNotConfigured(RegistryError):
    pass


@dataclass
class Manifest:
    media_type: str
    digest: str
    body: bytes
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES

    @property
    def layers(self) -> list[dict]:
        return self.data.get("layers", [])

    @property
    def size(self) -> int:
        return sum(int(layer.get("size", 0)) for layer in self.layers)


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """`Bearer realm="https://auth",service="registry",scope="…"` -> ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = dict(re.findall(r'(\w+)="([^"]*)"', rest))
    return scheme.lower(), params


class RegistryClient:
    def __init__(
        self,
        url: str,
        username: str = "",
        password: str = "",
        *,
        verify: bool = True,
        timeout: float = 15.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        if not url:
            raise RegistryNotConfigured(
                "No registry is configured: set GANTRY_REGISTRY_URL (and credentials)."
            )
        self.url = url.rstrip("/")
        self.host = urlsplit(self.url).netloc
        self.username = username
        self.password = password
        self._http = httpx.Client(
            verify=verify, timeout=timeout, transport=transport, follow_redirects=True
        )
        self._tokens: dict[str, str] = {}  # scope -> bearer token
        self._basic = False

    @classmethod
    def from_settings(cls) -> RegistryClient:
        from django.conf import settings

        return cls(
            settings.GANTRY_REGISTRY_URL,
            settings.GANTRY_REGISTRY_USERNAME,
            settings.GANTRY_REGISTRY_PASSWORD,
            verify=settings.GANTRY_REGISTRY_VERIFY_TLS,
            timeout=settings.GANTRY_REGISTRY_TIMEOUT_SECONDS,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- transport and authentication -------------------------------------------------

    def _auth_headers(self, scope: str) -> dict[str, str]:
        if scope in self._tokens:
            return {"Authorization": f"Bearer {self._tokens[scope]}"}
        if self._basic and self.username:
            pair = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        return {}

    def _fetch_token(self, params: dict[str, str], scope: str) -> str:
        realm = params.get("realm")
        if not realm:
            raise RegistryAuthError("The registry asked for a token but named no realm.")
        query = {"service": params.get("service", "")} if params.get("service") else {}
        if params.get("scope") or scope:
            query["scope"] = params.get("scope") or scope
        auth = httpx.BasicAuth(self.username, self.password) if self.username else None
        try:
            response = self._http.get(realm, params=query, auth=auth)
        except httpx.HTTPError as exc:
            raise RegistryUnavailable(f"Cannot reach the token service {realm}: {exc}") from exc
        if response.status_code in (401, 403):
            raise RegistryAuthError(
                f"The registry's token service refused the credentials ({response.status_code})."
            )
        if response.status_code != 200:
            raise RegistryError(f"The token service answered {response.status_code}.")
        try:
            body = response.json()
        except ValueError as exc:
            raise RegistryError("The token service did not answer JSON.") from exc
        token = body.get("token") or body.get("access_token")
        if not token:
            raise RegistryAuthError("The token service answered without a token.")
        return token

    def request(
        self,
        method: str,
        path: str,
        *,
        scope: str = "",
        headers: dict[str, str] | None = None,
        ok: tuple[int, ...] = (200,),
        what: str = "",
        **kwargs,
    ) -> httpx.Response:
        """One API call, answering an authentication challenge once."""
        url = path if path.startswith(("http://", "https://")) else f"{self.url}{path}"
        what = what or f"{method} {path}"
        for attempt in range(2):
            try:
                response = self._http.request(
                    method, url, headers={**(headers or {}), **self._auth_headers(scope)}, **kwargs
                )
            except httpx.HTTPError as exc:
                raise RegistryUnavailable(
                    f"Cannot reach the registry at {self.url}: {exc}"
                ) from exc
            if response.status_code == 401 and attempt == 0:
                scheme, params = _parse_challenge(response.headers.get("WWW-Authenticate", ""))
                if scheme == "basic":
                    if not self.username or self._basic:
                        break
                    self._basic = True
                    continue
                if scheme == "bearer":
                    self._tokens[scope] = self._fetch_token(params, scope)
                    continue
                break
            break
        if response.status_code == 401:
            who = f" as {self.username!r}" if self.username else " (no credentials configured)"
            raise RegistryAuthError(f"The registry {self.host} refused access{who}.")
        if response.status_code == 403:
            raise RegistryAuthError(f"The registry {self.host} does not allow {what}.")
        if response.status_code == 404:
            raise RegistryNotFound(f"Not found in the registry: {what}.")
        if response.status_code not in ok:
            detail = _error_detail(response)
            raise RegistryError(f"The registry answered {response.status_code} to {what}{detail}.")
        return response

    # --- reading ----------------------------------------------------------------------

    def ping(self) -> None:
        self.request("GET", "/v2/", what="the API version check")

    def repositories(self, limit: int = 1000) -> list[str]:
        """Every repository (`_catalog`), following `Link` pagination."""
        names: list[str] = []
        path = f"/v2/_catalog?n={limit}"
        while path:
            response = self.request(
                "GET", path, scope="registry:catalog:*", what="the repository list"
            )
            names.extend(response.json().get("repositories") or [])
            path = _next_link(response)
        return names

    def tags(self, repository: str) -> list[str]:
        path = f"/v2/{repository}/tags/list"
        tags: list[str] = []
        while path:
            response = self.request(
                "GET", path, scope=_pull(repository), what=f"the tags of {repository}"
            )
            tags.extend(response.json().get("tags") or [])
            path = _next_link(response)
        return sorted(tags)

    def manifest(self, repository: str, reference: str) -> Manifest:
        response = self.request(
            "GET",
            f"/v2/{repository}/manifests/{reference}",
            scope=_pull(repository),
            headers={"Accept": ACCEPT},
            what=f"{repository}:{reference}"
            if ":" not in reference
            else f"{repository}@{reference}",
        )
        body = response.content
        try:
            data = json.loads(body)
        except ValueError as exc:
            raise RegistryError(f"The manifest of {repository}:{reference} is not JSON.") from exc
        media_type = (
            data.get("mediaType") or response.headers.get("Content-Type", "").split(";")[0].strip()
        )
        if media_type not in MANIFEST_TYPES:
            raise RegistryError(
                f"{repository}:{reference} has an unsupported manifest type {media_type!r}."
            )
        digest = response.headers.get("Docker-Content-Digest") or sha256_digest(body)
        return Manifest(media_type=media_type, digest=digest, body=body, data=data)

    def resolve(self, repository: str, tag: str) -> str:
        """The digest a tag points at: the registry's Docker-Content-Digest header (from a
        HEAD, which does not count as a pull), else the sha256 of the manifest body."""
        response = self.request(
            "HEAD",
            f"/v2/{repository}/manifests/{tag}",
            scope=_pull(repository),
            headers={"Accept": ACCEPT},
            what=f"{repository}:{tag}",
        )
        digest = response.headers.get("Docker-Content-Digest")
        if digest:
            return digest
        return self.manifest(repository, tag).digest

    def platform_manifest(
        self, repository: str, reference: str, os: str = "linux", arch: str = "amd64"
    ) -> Manifest:
        """The single-platform manifest: an index is followed to its linux/amd64 entry."""
        manifest = self.manifest(repository, reference)
        if not manifest.is_index:
            return manifest
        for entry in manifest.data.get("manifests", []):
            platform = entry.get("platform") or {}
            if platform.get("os") == os and platform.get("architecture") == arch:
                return self.manifest(repository, entry["digest"])
        raise RegistryNotFound(f"{repository}:{reference} has no {os}/{arch} image.")

    def blob(self, repository: str, digest: str) -> bytes:
        response = self.request(
            "GET",
            f"/v2/{repository}/blobs/{digest}",
            scope=_pull(repository),
            what=f"blob {digest[:19]} of {repository}",
        )
        if sha256_digest(response.content) != digest and digest.startswith("sha256:"):
            raise RegistryError(f"Blob {digest} of {repository} does not match its digest.")
        return response.content

    def config(self, repository: str, reference: str) -> dict:
        """The image config (environment, entrypoint, labels) of a single-platform image."""
        manifest = self.platform_manifest(repository, reference)
        return json.loads(self.blob(repository, manifest.data["config"]["digest"]))

    def labels(self, repository: str, reference: str) -> dict[str, str]:
        return (self.config(repository, reference).get("config") or {}).get("Labels") or {}

    # --- writing ----------------------------------------------------------------------

    def blob_exists(self, repository: str, digest: str) -> bool:
        try:
            self.request("HEAD", f"/v2/{repository}/blobs/{digest}", scope=_push(repository))
        except RegistryNotFound:
            return False
        return True

    def mount_blob(self, repository: str, digest: str, source: str) -> bool:
        """Cross-repository mount; False when the registry wants the bytes instead."""
        response = self.request(
            "POST",
            f"/v2/{repository}/blobs/uploads/?mount={digest}&from={source}",
            scope=f"{_push(repository)} {_pull(source)}",
            ok=(201, 202),
            what=f"mounting {digest[:19]} into {repository}",
        )
        if response.status_code == 202 and response.headers.get("Location"):
            # An upload session was opened instead; close it politely.
            with contextlib.suppress(RegistryError):
                self.request("DELETE", self._location(response), scope=_push(repository), ok=(204,))
        return response.status_code == 201

    def upload_blob(self, repository: str, data: bytes) -> str:
        digest = sha256_digest(data)
        if self.blob_exists(repository, digest):
            return digest
        start = self.request(
            "POST",
            f"/v2/{repository}/blobs/uploads/",
            scope=_push(repository),
            ok=(202,),
            what=f"an upload to {repository}",
        )
        location = self._location(start)
        sep = "&" if "?" in location else "?"
        self.request(
            "PUT",
            f"{location}{sep}digest={digest}",
            scope=_push(repository),
            headers={"Content-Type": "application/octet-stream"},
            content=data,
            ok=(201,),
            what=f"uploading {digest[:19]} to {repository}",
        )
        return digest

    def put_manifest(self, repository: str, reference: str, media_type: str, body: bytes) -> str:
        response = self.request(
            "PUT",
            f"/v2/{repository}/manifests/{reference}",
            scope=_push(repository),
            headers={"Content-Type": media_type},
            content=body,
            ok=(201,),
            what=f"pushing {repository}:{reference}",
        )
        return response.headers.get("Docker-Content-Digest") or sha256_digest(body)

    def delete_manifest(self, repository: str, digest: str) -> None:
        if not digest.startswith("sha256:"):
            raise RegistryError("Manifests are deleted by digest, not by tag.")
        self.request(
            "DELETE",
            f"/v2/{repository}/manifests/{digest}",
            scope=f"repository:{repository}:delete",
            ok=(202,),
            what=f"deleting {repository}@{digest[:19]}",
        )

    def _location(self, response: httpx.Response) -> str:
        location = response.headers.get("Location", "")
        if not location:
            raise RegistryError("The registry opened an upload without a Location.")
        if location.startswith("/"):
            return f"{self.url}{location}"
        return location


def _pull(repository: str) -> str:
    return f"repository:{repository}:pull"


def _push(repository: str) -> str:
    return f"repository:{repository}:pull,push"


def _next_link(response: httpx.Response) -> str:
    match = re.search(r'<([^>]+)>;\s*rel="?next"?', response.headers.get("Link", ""))
    return match.group(1) if match else ""


def _error_detail(response: httpx.Response) -> str:
    try:
        errors = response.json().get("errors") or []
    except ValueError:
        return ""
    messages = [str(e.get("message") or e.get("code")) for e in errors if isinstance(e, dict)]
    return f": {'; '.join(messages)}" if messages else ""
