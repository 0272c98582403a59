"""A real Keycloak for the tests: the official distribution, started once per test session.

`platform/dev/keycloak-up` downloads the pinned `org.keycloak:keycloak-quarkus-dist` from
Maven Central once (checked against its SHA-512, built, cached by version in
/opt/gantry-keycloak) and runs it in development mode on loopback with its embedded
database (a fresh copy of the template made when it was built), importing
`platform/keycloak/lab-realm.json` as a lab would: that import is the test of the
example. The tests then do what the setup guide (platform/keycloak/README.md) tells a lab
administrator to do, through Keycloak's admin REST API: point the client at this Gantry's
address and regenerate its secret.

Every test using it is in the xdist group "keycloak" (`KEYCLOAK_GROUP` in its module's
`pytestmark`), so one worker starts one Keycloak for all of them. Keycloak takes one to
three minutes to start on two busy cores. Without Java or Maven Central the tests are
skipped, except under CI=true, where they fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from core.ports import free_port
from tests.conftest import service_required

ROOT = Path(__file__).resolve().parents[2]
KEYCLOAK_UP = ROOT / "platform" / "dev" / "keycloak-up"
REALM = "lab"
CLIENT_ID = "gantry"
KEYCLOAK_GROUP = pytest.mark.xdist_group("keycloak")
ADMIN = ("admin", "admin")  # made with keycloak-up's template database; loopback only
START_TIMEOUT = 600  # seconds; two busy cores start it in one to three minutes


class Keycloak:
    """A running Keycloak and its admin REST API (the master realm's administrator)."""

    def __init__(self, url: str):
        self.url = url
        self.issuer = f"{url}/realms/{REALM}"
        self.http = httpx.Client(timeout=60, trust_env=False)
        self._token = None
        self._token_expires = 0.0

    def _admin_token(self) -> str:
        if self._token is None or time.monotonic() > self._token_expires:
            answer = self.http.post(
                f"{self.url}/realms/master/protocol/openid-connect/token",
                data={
                    "grant_type": "password",
                    "client_id": "admin-cli",
                    "username": ADMIN[0],
                    "password": ADMIN[1],
                },
            )
            answer.raise_for_status()
            self._token = answer.json()["access_token"]
            self._token_expires = time.monotonic() + answer.json()["expires_in"] - 10
        return self._token

    def admin(self, method: str, path: str, **kwargs) -> httpx.Response:
        """`path` under /admin/realms/lab; raises on an error answer."""
        response = self.http.request(
            method,
            f"{self.url}/admin/realms/{REALM}{path}",
            headers={"Authorization": f"Bearer {self._admin_token()}"},
            **kwargs,
        )
        assert response.is_success, f"{method} {path}: {response.status_code} {response.text}"
        return response

    def client(self, client_id: str) -> dict:
        (client,) = self.admin("GET", "/clients", params={"clientId": client_id}).json()
        return client

    def user_id(self, username: str) -> str:
        (user,) = self.admin("GET", "/users", params={"username": username, "exact": True}).json()
        return user["id"]

    def group_id(self, path: str) -> str:
        return self.admin("GET", f"/group-by-path{path}").json()["id"]

    def create_user(self, username: str, password: str, groups: list[str], **fields) -> str:
        self.admin(
            "POST",
            "/users",
            json={
                "username": username,
                "enabled": True,
                "email": f"{username}@example.org",
                "emailVerified": True,
                "firstName": username.capitalize(),
                "lastName": "Tester",
                "credentials": [{"type": "password", "value": password, "temporary": False}],
                "groups": groups,
                **fields,
            },
        )
        return self.user_id(username)

    def token(self, client_id: str, username: str, password: str) -> str:
        """An access token by the password grant (a script's way), for a public client."""
        answer = self.http.post(
            f"{self.issuer}/protocol/openid-connect/token",
            data={
                "grant_type": "password",
                "client_id": client_id,
                "username": username,
                "password": password,
                "scope": "openid",
            },
        )
        assert answer.status_code == 200, answer.text
        return answer.json()["access_token"]


def _java_present() -> bool:
    return bool(os.environ.get("JAVA_HOME") or shutil.which("java"))


def _configure(server: Keycloak, live_server) -> Keycloak:
    """The setup guide, step 1: this Gantry's redirect and post-logout URIs, a new secret."""
    gantry = server.client(CLIENT_ID)
    gantry["redirectUris"] = [f"{live_server.url}/oidc/callback/"]
    gantry["attributes"]["post.logout.redirect.uris"] = f"{live_server.url}/accounts/login/"
    server.admin("PUT", f"/clients/{gantry['id']}", json=gantry)
    server.client_secret = server.admin("POST", f"/clients/{gantry['id']}/client-secret").json()[
        "value"
    ]
    return server


@pytest.fixture(scope="session")
def keycloak(live_server, tmp_path_factory):
    """Keycloak with the example realm imported, its client pointed at this live server.

    GANTRY_TEST_KEYCLOAK=http://127.0.0.1:<port> uses one already started with
    `platform/dev/keycloak-up --port <port>` instead, to save its start-up while writing
    tests.
    """
    if os.environ.get("GANTRY_TEST_KEYCLOAK"):
        server = Keycloak(os.environ["GANTRY_TEST_KEYCLOAK"].rstrip("/"))
        yield _configure(server, live_server)
        server.http.close()
        return
    service_required("Java (apt-get install openjdk-17-jre-headless)", _java_present())
    installed = subprocess.run(
        [KEYCLOAK_UP, "--install"], capture_output=True, text=True, timeout=1800
    )
    service_required(
        f"Keycloak from Maven Central (platform/dev/keycloak-up --install: {installed.stderr[-500:]})",
        installed.returncode == 0,
    )
    port = free_port()
    run_dir = tmp_path_factory.mktemp("keycloak")
    log_path = run_dir / "keycloak.log"
    log = open(log_path, "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [KEYCLOAK_UP, "--port", str(port), "--run-dir", str(run_dir / "home")],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    server = Keycloak(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                if server.http.get(f"{server.issuer}/.well-known/openid-configuration").is_success:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(
                    f"Keycloak did not come up on port {port} (exit {process.poll()}):\n"
                    + log_path.read_text(errors="replace")[-5000:]
                )
            time.sleep(1)
        _configure(server, live_server)
        yield server
    finally:
        server.http.close()
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
