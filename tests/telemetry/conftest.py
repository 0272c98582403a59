"""Fixtures for GPU telemetry tests.

No GPU exists on the machines these tests run on. `fake_nvml` builds a small C library
(fakenvml/fakenvml.c) that stands in for NVIDIA's hardware and driver: it is compiled
with gcc into a temporary directory as `libnvidia-ml.so.1`, the name the real binding
(nvidia-ml-py) opens, and found through LD_LIBRARY_PATH, so everything above the C ABI -
pynvml, the executor's sampler, ingestion, the telemetry app - is the real code. What the
GPUs report is scripted by a file the test rewrites while jobs run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.jobs.conftest import job_settings, running_jobs  # noqa: F401 - fixtures

SOURCE = Path(__file__).parent / "fakenvml" / "fakenvml.c"


@dataclass
class FakeNvml:
    directory: Path
    script: Path

    def set(self, *gpus: tuple[int, int, int, int]) -> None:
        """One (utilization %, memory MiB, power mW, temperature C) per GPU."""
        text = "".join(" ".join(str(v) for v in gpu) + "\n" for gpu in gpus)
        tmp = self.script.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.script)  # a reader never sees half a file


@pytest.fixture(scope="session")
def fake_nvml(tmp_path_factory) -> FakeNvml:
    gcc = shutil.which("gcc")
    if gcc is None:
        if os.environ.get("CI") == "true":
            pytest.fail("gcc is required to build the fake NVML (apt-get install gcc libc6-dev)")
        pytest.skip("gcc is not installed")
    directory = tmp_path_factory.mktemp("fakenvml")
    script = directory / "gpus.txt"
    subprocess.run(
        [
            gcc,
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Werror",
            f'-DFAKE_NVML_SCRIPT="{script}"',
            "-Wl,-soname,libnvidia-ml.so.1",
            "-o",
            str(directory / "libnvidia-ml.so.1"),
            str(SOURCE),
        ],
        check=True,
    )
    fake = FakeNvml(directory, script)
    fake.set((0, 0, 30000, 30))
    return fake
