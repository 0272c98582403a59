"""A real OCI registry for the tests: Debian's `docker-registry` (distribution 2.x).

Started on 127.0.0.1 and a free port (its packaged default listens on every
interface on :5000), filesystem storage in a temp dir, htpasswd auth (bcrypt,
written with `htpasswd -B` from apache2-utils), deletes enabled. Images are made
with umoci (no container engine) and pushed with skopeo.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from core.ports import free_port

USERNAME = "gantry"
PASSWORD = "registry-test-pw"
TOOLS = ("htpasswd", "skopeo", "umoci")


def registry_binary() -> str | None:
    return shutil.which("docker-registry") or shutil.which("registry")


def missing_tools() -> list[str]:
    missing = [tool for tool in TOOLS if not shutil.which(tool)]
    if not registry_binary():
        missing.insert(0, "docker-registry")
    return missing


@dataclass
class Registry:
    process: subprocess.Popen
    root: Path
    port: int

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def push_tiny_image(
        self, repository: str, tag: str, *, labels: dict | None = None, docker_v2: bool = False
    ) -> str:
        """Build a one-file image with umoci and push it; returns the pushed reference."""
        (self.root / "images").mkdir(exist_ok=True)
        work = Path(
            tempfile.mkdtemp(prefix=f"{repository.replace('/', '_')}-", dir=self.root / "images")
        )
        layout = work / "oci"
        run(["umoci", "init", "--layout", str(layout)])
        run(["umoci", "new", "--image", f"{layout}:img"])
        bundle = work / "bundle"
        run(["umoci", "unpack", "--rootless", "--image", f"{layout}:img", str(bundle)])
        (bundle / "rootfs" / "etc").mkdir(parents=True, exist_ok=True)
        (bundle / "rootfs" / "etc" / "gantry-test").write_text(f"{repository}:{tag}\n")
        run(["umoci", "repack", "--image", f"{layout}:img", str(bundle)])
        config = ["umoci", "config", "--image", f"{layout}:img", "--config.env", "LANG=C.UTF-8"]
        for key, value in (labels or {}).items():
            config += ["--config.label", f"{key}={value}"]
        run(config)
        target = f"{self.host}/{repository}:{tag}"
        command = ["skopeo", "copy", "--quiet", "--dest-creds", f"{USERNAME}:{PASSWORD}"]
        command += ["--dest-tls-verify=false"]
        if docker_v2:
            command += ["--format", "v2s2"]
        run([*command, f"oci:{layout}:img", f"docker://{target}"])
        return target

    def skopeo_digest(self, repository: str, tag: str) -> str:
        out = run(
            [
                "skopeo",
                "inspect",
                "--tls-verify=false",
                "--creds",
                f"{USERNAME}:{PASSWORD}",
                "--format",
                "{{.Digest}}",
                f"docker://{self.host}/{repository}:{tag}",
            ]
        )
        return out.strip()


def run(command: list[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {result.stderr.strip()}")
    return result.stdout


def start_registry(root: Path) -> Registry:
    root.mkdir(parents=True, exist_ok=True)
    htpasswd = root / "htpasswd"
    htpasswd.write_text(run(["htpasswd", "-Bbn", USERNAME, PASSWORD]))
    port = free_port()
    config = root / "config.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
        f"auth:\n  htpasswd:\n    realm: gantry-test\n    path: {htpasswd}\n"
    )
    log = (root / "registry.log").open("wb")
    process = subprocess.Popen(
        [registry_binary(), "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
    )
    registry = Registry(process=process, root=root, port=port)
    # Readiness, not timing: wait until /v2/ answers (401: it wants credentials).
    for _ in range(300):
        if process.poll() is not None:
            raise RuntimeError(f"docker-registry exited: {(root / 'registry.log').read_text()}")
        try:
            urllib.request.urlopen(f"{registry.url}/v2/", timeout=1)
        except urllib.error.HTTPError:
            return registry
        except OSError:
            time.sleep(0.1)
    registry.stop()
    raise RuntimeError("docker-registry did not start answering")
