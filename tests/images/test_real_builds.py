"""Real container images (issue 39, first part): built with buildah from a Debian base made
by mmdebstrap (`platform/dev/images-build`, run by .ci/run and cached), run in real
containers (runc), and pushed to the test registry, where Gantry's registry client reads
them.

The network rule: what runs here has no network at all (`--network none`); the only
traffic is buildah and Gantry's client talking to the test registry on 127.0.0.1.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from images.registry import RegistryClient
from tests.conftest import service_required
from tests.registry import PASSWORD, USERNAME

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "platform" / "dev" / "images-build"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built():
    """The references and buildah's flags, when the images are in the cache."""
    tools = [t for t in ("buildah", "mmdebstrap", "runc") if not shutil.which(t)]
    service_required(f"buildah, mmdebstrap and runc ({', '.join(tools)} missing)", not tools)
    env = dict(
        line.split("=", 1)
        for line in subprocess.run(
            [str(SCRIPT), "--env"], check=True, capture_output=True, text=True
        ).stdout.splitlines()
    )
    flags = shlex.split(env["BUILDAH_FLAGS"])

    def have(ref):
        return subprocess.run(["buildah", *flags, "inspect", "--type", "image", ref],
                              capture_output=True).returncode == 0

    service_required(
        "the images platform/dev/images-build makes (run it once)",
        have(env["GANTRY_BASE_IMAGE"]) and have(env["GANTRY_PYTHON_IMAGE"]),
    )
    yield env, flags
    # What the tests pulled and built here (vfs keeps a full copy of each: 0.5 GB apiece),
    # so runs on one machine do not fill its disk; the cached base and Python images stay.
    listed = buildah(flags, "images", "--format", "{{.ID}} {{.Name}} {{.Tag}}", check=False)
    rows = [line.split() for line in listed.stdout.splitlines() if len(line.split()) == 3]
    kept = {image for image, name, _ in rows if name.startswith("localhost/gantry/")}
    for image, name, tag in rows:
        if name.startswith(("127.0.0.1:", "localhost/test/")):
            if tag != "<none>":
                buildah(flags, "rmi", f"{name}:{tag}", check=False)  # a name; the image stays if kept
            elif image not in kept:
                buildah(flags, "rmi", "--force", image, check=False)
    buildah(flags, "rmi", "--prune", check=False)


def buildah(flags, *args, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["buildah", *flags, *args], capture_output=True, text=True,
                          check=check, timeout=600)


def run_in(flags, image: str, *command: str) -> subprocess.CompletedProcess:
    """`command` in a real container of `image`: runc, no network, removed afterwards."""
    ctr = buildah(flags, "from", "--quiet", "--pull-never", image).stdout.strip()
    try:
        return buildah(flags, "run", "--runtime", shutil.which("runc"), "--network", "none",
                       ctr, "--", *command, check=False)
    finally:
        buildah(flags, "rm", ctr, check=False)


def test_the_python_image_runs_the_executor_and_the_digits_libraries_offline(built):
    env, flags = built
    script = (
        "import socket, executor, sklearn\n"
        "from sklearn.datasets import load_digits\n"
        "from sklearn.linear_model import LogisticRegression\n"
        "x, y = load_digits(return_X_y=True)\n"
        "model = LogisticRegression(max_iter=200).fit(x[:1200], y[:1200])\n"
        "print('accuracy', round(model.score(x[1200:], y[1200:]), 2))\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
        "except OSError as exc:\n"
        "    print('network', type(exc).__name__)\n"
    )
    done = run_in(flags, env["GANTRY_PYTHON_IMAGE"], "python", "-c", script)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert float(lines["accuracy"]) > 0.85
    assert lines["network"] in ("ConnectionRefusedError", "OSError")  # loopback of its own only
    entry = json.loads(buildah(flags, "inspect", "--type", "image", env["GANTRY_PYTHON_IMAGE"]).stdout)
    assert entry["OCIv1"]["config"]["Entrypoint"] == ["python", "-m", "executor"]
    # Root of the image is Debian's, made here: no layer came from an image hub.
    assert entry["OCIv1"]["config"]["Labels"]["org.opencontainers.image.source"] == "platform/images/python"


def test_a_dockerfile_builds_on_it_without_network_and_gantry_reads_the_pushed_image(
    built, registry, tmp_path
):
    env, flags = built
    (tmp_path / "train.py").write_text("print('trained')\n")
    (tmp_path / "Dockerfile").write_text(
        f"FROM {env['GANTRY_PYTHON_IMAGE']}\n"
        'LABEL org.gantry.framework="scikit-learn"\n'
        "COPY train.py /workspace/train.py\n"
        "RUN python -c \"import sklearn, pathlib; pathlib.Path('/workspace/ok').write_text(sklearn.__version__)\"\n"
    )
    target = f"localhost/test/lab-model:{tmp_path.name[-8:]}"
    buildah(flags, "bud", "--quiet", "--pull-never", "--network", "none",
            "--runtime", shutil.which("runc"), "-t", target, str(tmp_path))
    done = run_in(flags, target, "python", "/workspace/train.py")
    assert (done.returncode, done.stdout.strip()) == (0, "trained"), done.stderr
    assert run_in(flags, target, "cat", "/workspace/ok").stdout.strip() == "1.9.1"

    buildah(flags, "push", "--quiet", "--tls-verify=false", "--creds", f"{USERNAME}:{PASSWORD}",
            target, f"docker://{registry.host}/lab/model:1")
    with RegistryClient(registry.url, USERNAME, PASSWORD) as client:
        digest = client.resolve("lab/model", "1")
        manifest = client.platform_manifest("lab/model", digest)
        config = json.loads(client.blob("lab/model", manifest.data["config"]["digest"]))
    assert digest.startswith("sha256:")
    assert config["config"]["Labels"]["org.gantry.framework"] == "scikit-learn"
    assert config["config"]["Entrypoint"] == ["python", "-m", "executor"]
    # buildah commits one layer per build: the Debian root mmdebstrap made (no hub), the
    # Python image's build, this one.
    base = json.loads(buildah(flags, "inspect", "--type", "image", env["GANTRY_BASE_IMAGE"]).stdout)
    assert len(manifest.layers) == 3
    assert config["rootfs"]["diff_ids"][0] == base["OCIv1"]["rootfs"]["diff_ids"][0]


def _platform_wheel(directory: Path) -> str:
    """A wheel tagged for CPython 3.11 on this machine's manylinux platform, as a package
    with compiled code is: the registry-only builder (pip on the host, pure-Python wheels
    only) refuses it; the real builder installs it with the image's own pip."""
    import base64
    import hashlib
    import platform
    import zipfile

    tag = f"cp311-cp311-manylinux_2_17_{platform.machine()}"
    files = {
        "gantryfast/__init__.py": b"import sys\nBUILT_FOR = sys.version_info[:2]\n",
        "gantryfast-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: gantryfast\nVersion: 1.0\n",
        "gantryfast-1.0.dist-info/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
        ),
    }
    record = ""
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(data)}\n"
    record += "gantryfast-1.0.dist-info/RECORD,,\n"
    with zipfile.ZipFile(directory / f"gantryfast-1.0-{tag}.whl", "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
        archive.writestr("gantryfast-1.0.dist-info/RECORD", record)
    return "gantryfast==1.0"


@pytest.mark.django_db
def test_the_build_action_uses_buildah_and_the_base_images_own_pip(
    built, use_registry, tenant, owner, settings, tmp_path
):
    import io

    from images import services
    from images.tasks import run_build

    env, flags = built
    buildah(flags, "push", "--quiet", "--tls-verify=false", "--creds", f"{USERNAME}:{PASSWORD}",
            env["GANTRY_PYTHON_IMAGE"], f"docker://{use_registry.host}/lab-a/python:3.11")
    base = services.create_image(owner, tenant, name="python", python_version="3.11",
                                 reference=f"{use_registry.host}/lab-a/python:3.11", resolve=True)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    requirement = _platform_wheel(wheels)
    settings.GANTRY_PIP_NO_INDEX = True
    settings.GANTRY_PIP_FIND_LINKS = str(wheels)
    settings.GANTRY_BUILDAH_STORAGE = flags[flags.index("--root") + 1].rsplit("/", 1)[0]

    def start(name):
        return services.start_build(owner, base, tenant, name=name, tag="v1",
                                    requirements=requirement,
                                    files=[("/opt/app/train.py", io.BytesIO(b"print('train')\n"))])

    # The registry-only path cannot install it: pip there is the host's, for pure wheels.
    settings.GANTRY_IMAGE_BUILDER = "registry"
    refused = start("registry-only")
    assert run_build(refused.pk) == "failed"
    refused.refresh_from_db()
    assert "pure-Python" in refused.error

    settings.GANTRY_IMAGE_BUILDER = "auto"  # buildah and runc are here
    build = start("real")
    result = run_build(build.pk)
    build.refresh_from_db()
    assert result == "succeeded", build.log
    build.refresh_from_db()
    assert "builder: buildah" in build.log
    assert "$ buildah run --runtime" in build.log and "--network none --user 65534:65534" in build.log
    assert PASSWORD not in build.log and "--creds" not in build.log  # an authfile instead
    image = build.result
    assert image.built_from == base and image.tenant == tenant
    with RegistryClient(use_registry.url, USERNAME, PASSWORD) as client:
        config = client.config("lab-a/real", image.digest)
    assert config["config"]["Labels"]["org.gantry.build"] == str(build.pk)
    assert config["config"]["Labels"]["org.gantry.python"] == "3.11"  # the base's, kept
    assert "PYTHONPATH=/opt/gantry/python" in config["config"]["Env"]

    # Run the pushed image: the package imports with the image's Python; pip ran as 65534.
    buildah(flags, "pull", "--quiet", "--tls-verify=false", "--creds",
            f"{USERNAME}:{PASSWORD}", f"docker://{use_registry.host}/lab-a/real@{image.digest}")
    script = (
        "import gantryfast, os; print(gantryfast.BUILT_FOR, "
        "os.stat(gantryfast.__file__).st_uid, open('/opt/app/train.py').read().strip())"
    )
    done = run_in(flags, f"{use_registry.host}/lab-a/real@{image.digest}", "python", "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().split(None, 3) == ["(3,", "11)", "65534", "print('train')"]
