"""Production starts: the configuration platform/k8s runs (GANTRY_ENV=production, static
files collected with hashed names), served by the production stack on loopback (nginx
terminating TLS in front of gunicorn and uvicorn: `manage.py serve --production`, with the
notebook origin beside it), and
every main page, the admin and the browsable API load in Chromium without a server error,
a console error or a Content-Security-Policy violation.

The database is a temporary SQLite file (the settings' embedded default), migrated here.
"""

import datetime
import ipaddress
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from core.ports import free_port
from tests.conftest import service_required

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "correct horse battery staple"

SEED = f"""
from django.contrib.auth import get_user_model
from accounts import services as accounts
from jobs.services import submit as jobs
from projects import services as projects

root = get_user_model().objects.create_superuser("root", "root@example.org", {PASSWORD!r})
tenant = accounts.create_tenant(actor=root, name="Lab A", slug="lab-a")
project = projects.create_project(actor=root, tenant=tenant, name="Vision", slug="vision")
job = jobs.submit_job(root, project, name="first", command="python -c pass")
print(tenant.pk, project.pk, job.pk)
"""



def self_signed_certificate(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@pytest.fixture(scope="module")
def production(tmp_path_factory):
    """The environment of a production deployment, its database migrated and its static
    files collected as the image would have them."""
    work = tmp_path_factory.mktemp("production")
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "DEBUG", "DJANGO_SETTINGS_MODULE")
        and not k.startswith("SECURE_")
    }
    env.update(
        GANTRY_ENV="production",
        SECRET_KEY=secrets.token_urlsafe(50),
        ALLOWED_HOSTS="127.0.0.1",
        CSRF_TRUSTED_ORIGINS=f"https://127.0.0.1:{port}",
        GANTRY_URL=f"https://127.0.0.1:{port}",
        GANTRY_DATA_DIR=str(work / "data"),
        GANTRY_STATIC_ROOT=str(work / "static"),
        GANTRY_NOTEBOOK_PORT=str(free_port()),
        LOG_LEVEL="WARNING",
    )

    def manage(*args, check=True):
        result = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )
        if check:
            assert result.returncode == 0, f"manage.py {' '.join(args)}:\n{result.stderr}"
        return result

    manage("migrate", "--noinput")
    collected = manage("collectstatic", "--noinput")
    assert "post-processed" in collected.stdout
    return {"env": env, "manage": manage, "port": port, "work": work}


@pytest.mark.slow
def test_seed_demo_refuses_production_and_creates_nobody(production):
    refused = production["manage"]("seed_demo", check=False)
    assert refused.returncode != 0
    assert "refuses to run with GANTRY_ENV=production" in refused.stderr
    assert "admin / gantry-demo" not in refused.stdout
    count = production["manage"](
        "shell", "-v", "0", "-c",
        "from django.contrib.auth import get_user_model; "
        "print(get_user_model().objects.filter(username='admin').count())",
    )
    assert count.stdout.strip() == "0"


@pytest.mark.slow
def test_the_deploy_checks_pass(production):
    checked = production["manage"]("check", "--deploy", check=False)
    assert checked.returncode == 0, checked.stderr
    assert "security.W" not in checked.stderr + checked.stdout


@pytest.mark.slow
def test_production_stack_serves_the_main_pages_admin_and_api_in_chromium(production):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:  # pragma: no cover - playwright is a dev dependency
        sync_playwright = None
    service_required("chromium + playwright", Path(CHROMIUM).exists() and sync_playwright is not None)
    from core.management.commands.serve import nginx_binary

    service_required("nginx (apt-get install nginx)", nginx_binary() is not None)

    tenant, project, job = production["manage"]("shell", "-v", "0", "-c", SEED).stdout.split()
    cert, key = self_signed_certificate(production["work"])
    port = production["port"]
    base = f"https://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--production", "--no-worker",
         "--port", str(port), "--tls-cert", str(cert), "--tls-key", str(key)],
        cwd=ROOT, env=production["env"], start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        wait_for(base + "/healthz", server)
        pages = [
            "/",
            "/tenants/",
            f"/tenants/{tenant}/",
            "/projects/",
            f"/projects/{project}/",
            f"/projects/{project}/members/",
            "/jobs/",
            f"/jobs/{job}/",
            "/settings/tokens/",
            "/audit/",
            "/api/docs/",
        ]
        admin_pages = ["/admin/", "/admin/accounts/user/", "/admin/jobs/job/", "/admin/axes/accessattempt/"]
        api_pages = ["/api/v1/jobs/", f"/api/v1/jobs/{job}/", "/api/v1/projects/", "/api/v1/me/"]
        problems = []
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
            )
            try:
                context = browser.new_context(ignore_https_errors=True)
                page = context.new_page()
                watch(page, problems)

                # Sign in through the real form: CSRF, secure cookies, the session. Django
                # knows the request came over TLS from the proxy's X-Forwarded-Proto.
                signin = page.goto(base + "/accounts/login/")
                assert signin is not None and signin.status == 200, signin and signin.status
                assert "max-age=31536000" in signin.headers["strict-transport-security"]
                assert "Sign in" in page.title()
                page.fill("input[name=username]", "root")
                page.fill("input[name=password]", PASSWORD)
                with page.expect_navigation():
                    page.click("button[type=submit]")
                assert page.url == base + "/", f"sign-in ended at {page.url}"
                cookies = {c["name"]: c for c in context.cookies()}
                assert cookies["sessionid"]["secure"] and cookies["sessionid"]["httpOnly"]
                assert cookies["csrftoken"]["secure"]

                for path in pages + admin_pages + api_pages:
                    visit(page, base + path, problems)

                # The job page's live log socket goes through nginx to uvicorn and is let in.
                with page.expect_websocket() as opened:
                    visit(page, base + f"/jobs/{job}/", problems)
                socket_ = opened.value
                assert f"/ws/jobs/{job}/" in socket_.url
                frame = socket_.wait_for_event("framereceived")
                assert '"type"' in str(frame)
            finally:
                browser.close()
        assert not problems, "\n".join(problems)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            out, _ = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            raise
    assert "Traceback" not in out, out[-4000:]
    assert server.returncode == 0, out[-4000:]


def wait_for(url, server, timeout=90):
    import ssl

    unverified = ssl.create_default_context()
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=5, context=unverified).read()
            return
        except OSError:
            if server.poll() is not None:
                pytest.fail(f"serve --production exited:\n{server.stdout.read()[-4000:]}")
            assert time.monotonic() < deadline, f"{url} did not answer within {timeout} s"
            time.sleep(0.3)


def watch(page, problems):
    page.on("console", lambda msg: msg.type == "error" and problems.append(f"{page.url}: console: {msg.text}"))
    page.on("pageerror", lambda exc: problems.append(f"{page.url}: script error: {exc}"))
    page.on(
        "response",
        lambda r: r.status >= 400 and problems.append(f"{page.url}: {r.status} for {r.url}"),
    )


def visit(page, url, problems):
    response = page.goto(url, wait_until="load")
    if response is None or response.status != 200:
        problems.append(f"{url}: {response and response.status}")


def test_the_nginx_example_site_is_valid_nginx(tmp_path):
    """platform/nginx/gantry.conf, with its paths pointed here, passes `nginx -t` inside an
    http block, as /etc/nginx/nginx.conf includes conf.d/."""
    from core.management.commands.serve import nginx_binary

    nginx = nginx_binary()
    service_required("nginx (apt-get install nginx)", nginx is not None)
    cert, key = self_signed_certificate(tmp_path)
    site = (ROOT / "platform" / "nginx" / "gantry.conf").read_text()
    for example, here in [
        ("/srv/gantry/platform/nginx/", f"{ROOT}/platform/nginx/"),
        ("/etc/ssl/gantry/fullchain.pem", str(cert)),
        ("/etc/ssl/gantry/privkey.pem", str(key)),
        ("/etc/ssl/gantry/nb-wildcard-fullchain.pem", str(cert)),
        ("/etc/ssl/gantry/nb-wildcard-privkey.pem", str(key)),
    ]:
        assert example in site
        site = site.replace(example, here)
    (tmp_path / "gantry.conf").write_text(site)
    (tmp_path / "nginx.conf").write_text(
        f"pid {tmp_path}/nginx.pid;\nerror_log stderr;\nevents {{}}\n"
        f"http {{\n  client_body_temp_path {tmp_path}/body;\n  proxy_temp_path {tmp_path}/proxy;\n"
        f"  include {tmp_path}/gantry.conf;\n}}\n"
    )
    checked = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
        capture_output=True, text=True, timeout=30,
    )
    assert checked.returncode == 0, checked.stderr
    assert "syntax is ok" in checked.stderr
