"""A job runs its code snapshot: the local backend, a real executor, a live server."""

import pytest

from jobs.queries import log_lines
from jobs.services.submit import submit_job
from tests.jobs.conftest import wait_for
from tests.snapshots.builders import make_snapshot

pytestmark = pytest.mark.slow

HELLO = b"""\
import os
from pkg.greeting import WORDS
print(WORDS)
try:
    open("hello.py", "a")
except OSError as exc:
    print("source is read-only:", type(exc).__name__)
with open(os.path.join("pkg", "written.txt"), "w") as fh:
    fh.write("the job writes beside its code")
print("folder is writable")
"""


def test_a_local_job_runs_python_hello_py_from_its_snapshot(running_jobs, owner, project):
    files = {
        "hello.py": HELLO,
        "pkg/__init__.py": b"",
        "pkg/greeting.py": b"WORDS = 'hello from the snapshot'\n",
    }
    snapshot = make_snapshot(owner, project, files)
    job = submit_job(
        owner, project, name="hello", command="python hello.py", code_snapshot=snapshot
    )
    wait_for(job, "succeeded", "failed")
    lines = [line["text"] for line in log_lines(job)]
    assert job.state == "succeeded", (job.state_reason, lines[-15:])
    assert "hello from the snapshot" in lines
    assert "source is read-only: PermissionError" in lines
    assert "folder is writable" in lines
    assert any("staging code snapshot" in line for line in lines)
