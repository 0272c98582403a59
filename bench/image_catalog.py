"""The catalog's framework images (platform/images/<framework>/Dockerfile, as they are) built
with no image hub: FROM Gantry's Python image, which platform/dev/images-build makes from
Debian's packages. `make image-pytorch`, `make image-tensorflow` and `make image-mxnet` run
it; each needs time and disk (PyPI's wheels bring their CUDA libraries: several GB), so CI
does not.

    python bench/image_catalog.py pytorch|tensorflow|mxnet [--out bench/results/image_<fw>.json]

Writes the build's wall time, the image's size and layers, and what runs inside it (the
framework's version and CUDA build, checked in a runc container with no network).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import time
from datetime import UTC, datetime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# framework -> (the image built, a probe printing "<name> <value>" lines inside it)
FRAMEWORKS = {
    "pytorch": (
        "localhost/gantry/pytorch:2.7.1-local",
        "import torch, torchvision, executor; print('torch', torch.__version__); "
        "print('torch_cuda', torch.version.cuda); print('torchvision', torchvision.__version__)",
    ),
    "mxnet": (
        "localhost/gantry/mxnet:1.9.1-local",
        "import mxnet as mx, executor\n"
        "from mxnet import autograd, gluon\n"
        "print('mxnet', mx.__version__)\n"
        "print('mxnet_cuda', mx.runtime.Features().is_enabled('CUDA'))\n"
        "ones = mx.nd.ones((64, 64))\n"
        "print('matmul', float(mx.nd.dot(ones, ones).sum().asscalar()))\n"
        "net = gluon.nn.Dense(10)\n"
        "net.initialize()\n"
        "with autograd.record():\n"
        "    y = net(mx.nd.ones((4, 64))).sum()\n"
        "y.backward()\n"
        "print('gluon_grad', net.weight.grad().shape)",
    ),
    "tensorflow": (
        "localhost/gantry/tensorflow:2.19.0-local",
        "import os; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'; import tensorflow as tf, executor; "
        "print('tensorflow', tf.__version__); "
        "print('tensorflow_cuda', tf.sysconfig.get_build_info().get('cuda_version')); "
        "print('keras', tf.keras.__version__ if hasattr(tf.keras, '__version__') else '?'); "
        "print('matmul', float(tf.reduce_sum(tf.ones((64, 64)) @ tf.ones((64, 64)))))",
    ),
}

# More build arguments where the Dockerfile's defaults need a hub's base: MXNet's CPU wheel
# (the local base has no CUDA libraries for mxnet-cu112 to load), on the Debian base
# rather than the Python image (MXNet 1.9 needs NumPy 1.23, which that image's SciPy and
# scikit-learn do not take; its Ubuntu base has neither).
BUILD_ARGS = {"mxnet": ["MXNET=mxnet"]}
BASES = {"mxnet": "GANTRY_BASE_IMAGE"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("framework", choices=sorted(FRAMEWORKS))
    parser.add_argument("--out", help="default: bench/results/image_<framework>.json")
    parser.add_argument("--if-missing", action="store_true",
                        help="build only where the image is not in buildah's store yet")
    args = parser.parse_args()
    target, probe = FRAMEWORKS[args.framework]
    out = args.out or os.path.join(ROOT, "bench", "results", f"image_{args.framework}.json")
    script = os.path.join(ROOT, "platform", "dev", "images-build")
    subprocess.run([script], check=True)
    env = dict(line.split("=", 1) for line in subprocess.run(
        [script, "--env"], check=True, capture_output=True, text=True).stdout.splitlines())
    flags = shlex.split(env["BUILDAH_FLAGS"])
    if args.if_missing and subprocess.run(["buildah", *flags, "inspect", "--type", "image",
                                           target], capture_output=True).returncode == 0:
        print(f"{target} is built already")
        return
    runc = shutil.which("runc")
    cert = "/etc/ssl/certs/ca-certificates.crt"
    started = time.monotonic()
    subprocess.run(
        ["buildah", *flags, "bud", "--quiet", "--runtime", runc, "--network", "host",
         "--volume", f"{cert}:{cert}:ro", "--env", f"PIP_CERT={cert}",
         "--build-arg", f"BASE={env[BASES.get(args.framework, 'GANTRY_PYTHON_IMAGE')]}",
         *[a for arg in BUILD_ARGS.get(args.framework, []) for a in ("--build-arg", arg)],
         "-f", os.path.join(ROOT, "platform", "images", args.framework, "Dockerfile"),
         "-t", target, ROOT],
        check=True,
    )
    build_s = time.monotonic() - started
    inspect = json.loads(subprocess.run(["buildah", *flags, "inspect", "--type", "image", target],
                                        check=True, capture_output=True, text=True).stdout)
    sizes = subprocess.run(["buildah", *flags, "images", "--format", "{{.Size}}", target],
                           check=True, capture_output=True, text=True).stdout.split()
    ctr = subprocess.run(["buildah", *flags, "from", "--quiet", "--pull-never", target],
                         check=True, capture_output=True, text=True).stdout.strip()
    try:
        inside = subprocess.run(
            ["buildah", *flags, "run", "--runtime", runc, "--network", "none", ctr, "--",
             "python", "-c", probe],
            check=True, capture_output=True, text=True).stdout.splitlines()
    finally:
        subprocess.run(["buildah", *flags, "rm", ctr], capture_output=True)
    result = {
        "what": f"platform/images/{args.framework}/Dockerfile built with buildah FROM Gantry's "
                "Python image or base (Debian bookworm from mmdebstrap), no image hub",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "base": env[BASES.get(args.framework, "GANTRY_PYTHON_IMAGE")],
        "build_s": round(build_s, 1),
        "size": " ".join(sizes),
        "layers": len(inspect["OCIv1"]["rootfs"]["diff_ids"]),
        **dict(line.split(" ", 1) for line in inside if " " in line),
    }
    with open(out, "w") as fh:
        json.dump(result, fh, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
