"""How `gantry run` sends a snapshot's missing contents: small files many to a request
(a tar whose members are named by sha256, POST /snapshots/<id>/blobs), a file bigger than
a batch alone (PUT), nothing at all for an unchanged tree. Against a live Gantry (uvicorn
over the test database); the requests are counted as they leave the SDK."""

import json
import os
from pathlib import Path

import pytest
from django.db import connection
from gantry_cli import snapshot
from gantry_cli.sdk import Gantry

from projects.models import Project
from snapshots.models import CodeSnapshot
from tests.faults.procs import Uvicorn

MiB = 1024 * 1024


def entries(*sizes: int) -> list[snapshot.FileEntry]:
    return [
        snapshot.FileEntry(f"f{i}", size, 0o644, Path("/nonexistent"), f"{i:064x}")
        for i, size in enumerate(sizes)
    ]


def test_batches_hold_at_most_the_batch_size_and_file_count_and_big_files_go_alone():
    batches, alone = snapshot.plan(entries(3, 3, 3, 9, 4, 1, 1, 1, 1), batch_bytes=8, batch_files=3)
    assert [[e.size for e in b] for b in batches] == [[3, 3], [3, 4, 1], [1, 1, 1]]
    assert [e.size for e in alone] == [9]
    assert snapshot.plan([]) == ([], [])


def test_the_streamed_tar_has_its_announced_length_and_a_file_changed_meanwhile_stops_it(tmp_path):
    import hashlib
    import io
    import tarfile

    files = []
    for i, size in enumerate([0, 1, 511, 512, 513, 300_000, 1_048_577]):
        data = os.urandom(size)
        (tmp_path / f"f{i}").write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        files.append(snapshot.FileEntry(f"f{i}", size, 0o644, tmp_path / f"f{i}", sha))
    body = b"".join(snapshot.tar_stream(files))
    assert len(body) == snapshot.tar_length(files)
    with tarfile.open(fileobj=io.BytesIO(body), mode="r|") as tar:
        names = [(m.name, hashlib.sha256(tar.extractfile(m).read()).hexdigest()) for m in tar]
    assert names == [(f.sha256, f.sha256) for f in files]

    (tmp_path / "f5").write_bytes(b"shorter now")
    with pytest.raises(snapshot.Changed, match="f5 changed while it was being sent"):
        b"".join(snapshot.tar_stream(files))


@pytest.fixture
def live_web(transactional_db, tmp_path):
    web = Uvicorn(tmp_path, GANTRY_DATA_DIR=str(tmp_path / "server-data"))
    web.start()
    try:
        yield web
    finally:
        connection.close()
        web.stop()


def counting_sdk(url: str, token: str) -> tuple[Gantry, list[str]]:
    """The SDK with every request it sends written down as 'METHOD path'."""
    g = Gantry(url, token)
    seen: list[str] = []
    g.client.http.event_hooks["request"].append(
        lambda request: seen.append(f"{request.method} {request.url.path}")
    )
    return g, seen


@pytest.mark.slow
def test_run_sends_small_files_in_one_tar_a_big_one_alone_and_an_unchanged_tree_in_one_request(
    live_web, gantry_cli, write_token, project, tmp_path
):
    code = tmp_path / "code"
    for i in range(300):
        path = code / f"pkg{i % 7}" / f"mod_{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"VALUE = {i}\n" + "# padding\n" * (i % 50))
    (code / "copy_of_mod_0.py").write_text((code / "pkg0" / "mod_0.py").read_text())
    (code / "weights.bin").write_bytes(os.urandom(5 * MiB))  # over a batch: sent alone

    done = gantry_cli(
        "run", "--json", "-p", "vision", "--", "python", "pkg0/mod_0.py",
        url=live_web.url, cwd=code,
    )  # fmt: skip

    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-2000:])
    sent = json.loads(done.stdout)["snapshot"]
    assert sent["file_count"] == 302
    assert sent["uploaded_blobs"] == 301  # the copy's content once
    # The manifest, one tar of the 300 small contents, one PUT, the finalize.
    assert sent["upload_requests"] == 4
    stored = CodeSnapshot.objects.get(pk=sent["id"])
    assert stored.state == "ready"
    assert not stored.files.filter(blob=None).exists()
    assert stored.size == sum(p.stat().st_size for p in code.rglob("*") if p.is_file())

    # Unchanged: one request, nothing sent. One file changed: its content in one tar.
    g, seen = counting_sdk(live_web.url, write_token)
    project_id = Project.objects.get(slug="vision").pk
    tree = snapshot.collect(code)
    snapshot.hash_files(tree)
    again = snapshot.upload(g, project_id, tree, None)
    assert seen == ["POST /api/v1/snapshots/"]
    assert (again.blobs_sent, again.requests, again.snapshot["state"]) == (0, 1, "ready")

    (code / "pkg3" / "mod_3.py").write_text("VALUE = 'changed'\n")
    seen.clear()
    tree = snapshot.collect(code)
    snapshot.hash_files(tree)
    progress: list[tuple[int, int]] = []
    changed = snapshot.upload(g, project_id, tree, None, progress=lambda t, n: progress.append((t, n)))
    g.close()
    new_id = changed.snapshot["id"]
    assert seen == [
        "POST /api/v1/snapshots/",
        f"POST /api/v1/snapshots/{new_id}/blobs",
        f"POST /api/v1/snapshots/{new_id}/finalize",
    ]
    assert changed.snapshot["state"] == "ready" and changed.bytes_sent == 18
    assert progress == [(18, 0), (18, 18)]  # sized, then by bytes
