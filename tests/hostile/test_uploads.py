"""Uploads: file names that escape or deceive, hostile archives, parts out of bounds,
and sizes over the limits."""

from __future__ import annotations

import hashlib
import io
import tarfile
import zipfile

import pytest
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile

from datasets.models import ArchiveImport
from datasets.services.uploads import start_upload
from tests.hostile.corpus import PATHS
from tests.hostile.world import (
    BASES,
    Outcome,
    _api,
    _json_text,
    _problems_of_answer,
    _send_json,
    probe,
    refusal_problems,
)
from tests.modelhub.builders import safetensors_bytes

pytestmark = pytest.mark.django_db


# --- uploads: file names, archives, parts, sizes ------------------------------------------

BAD_UPLOAD_PATHS = [
    *(h.value for h in PATHS),
    "/abs/path",
    "./a",
    "a/./b",
    "a//b",
    "a/",
    ".gantry/token",
    "name\u202egnp.exe",  # a right-to-left override hides the real extension
    "zero\u200bwidth",
    "line\nbreak",
    "n" * 256,
    "/".join(["d" * 200] * 6),  # over 1024 bytes in all
    "é" * 200,  # 400 bytes: over 255 per name
]


def test_upload_file_names_that_escape_or_deceive_are_refused(world):
    api = _api(world["owner"])
    base = BASES[("post", "/api/v1/uploads/")].body(world)
    problems = []
    for path in BAD_UPLOAD_PATHS:
        for where, body in (
            ("files", {**base, "files": [{"path": path, "size": 4}]}),
            ("remove", {**base, "files": [], "remove": [path]}),
        ):
            outcome = probe(_send_json(api, "post", "/api/v1/uploads/", _json_text(body)))
            problems += _problems_of_answer(outcome, True, f"{where} {path!r:.60}")
    assert not problems, "\n".join(problems)


def test_upload_file_lists_that_make_no_sense_are_refused(world):
    api = _api(world["owner"])
    base = BASES[("post", "/api/v1/uploads/")].body(world)
    cases = {
        "size-negative": [{"path": "a", "size": -1}],
        "size-huge": [{"path": "a", "size": 10**30}],
        "size-float": [{"path": "a", "size": 1.5}],
        "size-missing": [{"path": "a"}],
        "sha256-not-hex": [{"path": "a", "size": 1, "sha256": "z" * 64}],
        "sha256-too-long": [{"path": "a", "size": 1, "sha256": "0" * 65}],
        "listed-twice": [{"path": "a", "size": 1}, {"path": "a", "size": 1}],
        "file-and-folder": [{"path": "a", "size": 1}, {"path": "a/b", "size": 1}],
        "entry-not-an-object": ["a"],
        "files-an-object": {"path": "a", "size": 1},
        "nothing-to-do": [],
    }
    problems = []
    for name, files in cases.items():
        outcome = probe(
            _send_json(api, "post", "/api/v1/uploads/", _json_text({**base, "files": files}))
        )
        problems += _problems_of_answer(outcome, True, name)
    outcome = probe(
        _send_json(api, "post", "/api/v1/uploads/", _json_text({**base, "parent": "../../1"}))
    )
    problems += _problems_of_answer(outcome, True, "parent")
    other = {**base, "dataset": world["other_dataset"].pk}
    outcome = probe(_send_json(api, "post", "/api/v1/uploads/", _json_text(other)))
    problems += _problems_of_answer(outcome, True, "another tenant's dataset")
    assert not problems, "\n".join(problems)


def test_an_upload_over_the_tenant_quota_is_refused_before_a_byte_moves(world, settings):
    settings.GANTRY_TENANT_STORAGE_QUOTA_GB = 0.000001  # about 1 KB
    body = {
        **BASES[("post", "/api/v1/uploads/")].body(world),
        "files": [{"path": "big", "size": 5000}],
    }
    outcome = probe(_send_json(_api(world["owner"]), "post", "/api/v1/uploads/", _json_text(body)))
    assert not refusal_problems(outcome), outcome.show()
    assert "storage" in outcome.content.decode()


def test_part_uploads_out_of_bounds_are_refused(world):
    upload = world["upload"]
    file = upload.files.get()  # 4 bytes: one part
    api = _api(world["owner"])
    url = f"/api/v1/uploads/{upload.pk}/part/"
    other = start_upload(
        world["outsider"], world["other_dataset"], files=[{"path": "x", "size": 4}]
    )
    good = b"data"
    cases = {
        "file-word": ("?file=abc&number=1", good, hashlib.sha256(good).hexdigest()),
        "file-other-session": (
            f"?file={other.files.get().pk}&number=1",
            good,
            hashlib.sha256(good).hexdigest(),
        ),
        "number-word": (f"?file={file.pk}&number=abc", good, hashlib.sha256(good).hexdigest()),
        "number-zero": (f"?file={file.pk}&number=0", good, hashlib.sha256(good).hexdigest()),
        "number-huge": (f"?file={file.pk}&number={10**30}", good, hashlib.sha256(good).hexdigest()),
        "number-two": (f"?file={file.pk}&number=2", good, hashlib.sha256(good).hexdigest()),
        "too-large": (
            f"?file={file.pk}&number=1",
            good * 1000,
            hashlib.sha256(good * 1000).hexdigest(),
        ),
        "too-small": (f"?file={file.pk}&number=1", b"da", hashlib.sha256(b"da").hexdigest()),
        "checksum-wrong": (f"?file={file.pk}&number=1", good, "0" * 64),
        "checksum-missing": (f"?file={file.pk}&number=1", good, ""),
        "checksum-nul": (f"?file={file.pk}&number=1", good, "\x00" * 64),
    }
    problems = []
    for name, (query, data, digest) in cases.items():
        outcome = probe(
            lambda q=query, d=data, h=digest: api.generic(
                "PUT", url + q, d, content_type="application/octet-stream", HTTP_X_PART_SHA256=h
            ),
            upload,
        )
        problems += _problems_of_answer(outcome, True, name)
    # The control: the right part is kept.
    outcome = probe(
        lambda: api.generic(
            "PUT",
            f"{url}?file={file.pk}&number=1",
            good,
            content_type="application/octet-stream",
            HTTP_X_PART_SHA256=hashlib.sha256(good).hexdigest(),
        )
    )
    assert outcome.status == 200, outcome.show()
    assert not problems, "\n".join(problems)


def _zip(
    members: dict[str, bytes], *, link: str | None = None, encrypted=False, method=None
) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            zf.writestr(info, data)
        if link:
            info = zipfile.ZipInfo(link)
            info.external_attr = 0o120777 << 16
            zf.writestr(info, "/etc/passwd")
    data = buffer.getvalue()
    if encrypted:  # set the "encrypted" flag in the local and central headers
        data = data.replace(b"PK\x03\x04\x14\x00\x00\x00", b"PK\x03\x04\x14\x00\x01\x00", 1)
        data = data.replace(
            b"PK\x01\x02\x14\x03\x14\x00\x00\x00", b"PK\x01\x02\x14\x03\x14\x00\x01\x00", 1
        )
    if method is not None:  # claim a compression method nothing implements
        data = data.replace(
            b"PK\x03\x04\x14\x00\x00\x00\x00\x00", b"PK\x03\x04\x14\x00\x00\x00" + method, 1
        )
        data = data.replace(
            b"PK\x01\x02\x14\x03\x14\x00\x00\x00\x00\x00",
            b"PK\x01\x02\x14\x03\x14\x00\x00\x00" + method,
            1,
        )
    return data


def _tar(members: dict[str, bytes], *, links=(), special=(), mode="w:gz") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target, kind in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tf.addfile(info)
        for name, kind in special:
            info = tarfile.TarInfo(name)
            info.type = kind
            tf.addfile(info)
    return buffer.getvalue()


HOSTILE_ARCHIVES = {
    "zip-dotdot": ("a.zip", _zip({"../evil": b"x"})),
    "zip-inner-dotdot": ("a.zip", _zip({"ok/../../evil": b"x"})),
    "zip-absolute": ("a.zip", _zip({"/abs/path": b"x"})),
    "zip-backslashes": ("a.zip", _zip({"..\\..\\evil": b"x"})),
    "zip-drive-letter": ("a.zip", _zip({"C:/evil": b"x"})),
    "zip-symlink": ("a.zip", _zip({"ok": b"x"}, link="evil")),
    "zip-control-chars": ("a.zip", _zip({"a\x1b[31m": b"x"})),
    "zip-rtl-override": ("a.zip", _zip({"a\u202etxt.exe": b"x"})),
    "zip-gantry-dir": ("a.zip", _zip({".gantry/token": b"x"})),
    "zip-twice": ("a.zip", _zip({"a": b"x", "./a": b"y"})),
    "zip-file-and-folder": ("a.zip", _zip({"a": b"x", "a/b": b"y"})),
    "zip-encrypted": ("a.zip", _zip({"a": b"x"}, encrypted=True)),
    "zip-unknown-compression": ("a.zip", _zip({"a": b"x"}, method=b"\x63\x00")),
    "zip-empty": ("a.zip", _zip({})),
    "zip-bomb": ("a.zip", None),  # built below: deflated zeros
    "tar-dotdot": ("a.tar", _tar({"../evil": b"x"}, mode="w")),
    "tar-dot-dotdot": ("a.tar", _tar({"./../evil": b"x"}, mode="w")),
    "tar-absolute": ("a.tar.gz", _tar({"/abs/path": b"x"})),
    "tar-symlink-out": (
        "a.tar.gz",
        _tar({"ok": b"x"}, links=[("l", "/etc/passwd", tarfile.SYMTYPE)]),
    ),
    "tar-hardlink-out": ("a.tgz", _tar({"ok": b"x"}, links=[("h", "../../x", tarfile.LNKTYPE)])),
    "tar-fifo": ("a.tar.gz", _tar({"ok": b"x"}, special=[("p", tarfile.FIFOTYPE)])),
    "tar-device": ("a.tar.gz", _tar({"ok": b"x"}, special=[("d", tarfile.CHRTYPE)])),
    "tar-truncated": ("a.tar", _tar({"a": b"x" * 5000}, mode="w")[:700]),
    "not-an-archive": ("a.zip", b"this is not an archive"),
    "wrong-suffix": ("a.exe", _zip({"a": b"x"})),
}


def _bomb() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros", b"\0" * (4 * 1024 * 1024))
    return buffer.getvalue()


def _archive_problems(world, send_archive) -> list[str]:
    problems = []
    for name, (file_name, payload) in HOSTILE_ARCHIVES.items():
        payload = payload if payload is not None else _bomb()
        outcome = probe(lambda f=file_name, p=payload: send_archive(f, p), world["dataset"])
        problems += [f"{name}: {p}" for p in _archive_refusal_problems(outcome)]
    return problems


def _archive_refusal_problems(outcome: Outcome) -> list[str]:
    if "html" in outcome.content_type:  # the form page re-rendered with its error
        problems = [] if outcome.status in (200, 400) else [f"answered {outcome.show()}"]
        if "invalid-feedback" not in outcome.content.decode():
            problems.append("no error shown on the form")
        return problems + ([f"changed {outcome.changes[:5]}"] if outcome.changes else [])
    return refusal_problems(outcome)


def test_hostile_archives_are_refused_at_upload_through_the_api(world):
    api = _api(world["owner"])
    url = f"/api/v1/datasets/{world['dataset'].pk}/archive/"

    def send(file_name, payload):
        upload = SimpleUploadedFile(file_name, payload, content_type="application/octet-stream")
        return api.post(url, {"archive": upload, "parent": "latest"}, format="multipart")

    problems = _archive_problems(world, send)
    assert not problems, "\n".join(problems)


def test_hostile_archives_are_refused_at_upload_through_the_form(world, client):
    client.force_login(world["owner"])
    url = f"/datasets/{world['dataset'].pk}/archive/"

    def send(file_name, payload):
        return client.post(url, {"archive": SimpleUploadedFile(file_name, payload)})

    problems = _archive_problems(world, send)
    assert not problems, "\n".join(problems)


def test_a_good_archive_is_still_accepted_and_named_by_its_base_name(world):
    """The control for the archive tests, and the uploaded file's own name: a path in it
    is cut to its last part by Django before Gantry sees it, and never used as a path."""
    api = _api(world["owner"])
    url = f"/api/v1/datasets/{world['dataset'].pk}/archive/"
    for file_name in ("../../../evil.zip", "..\\..\\evil.zip", "/etc/evil.zip"):
        upload = SimpleUploadedFile(file_name, _zip({"a/b.txt": b"x"}))
        response = api.post(url, {"archive": upload}, format="multipart")
        assert response.status_code == 202, response.content
        archive = ArchiveImport.objects.get(pk=response.json()["id"])
        assert archive.file_name == "evil.zip"
        assert archive.staging_key.startswith("archives/")


def _multipart(fields: dict[str, str], file_field: str, file_name: str, payload: bytes):
    """A multipart body written by hand: the test client would clean the file name."""
    boundary = "hostile-boundary"
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{file_field}"; '
        f'filename="{file_name}"\r\nContent-Type: application/octet-stream\r\n\r\n'.encode()
        + payload
        + b"\r\n"
    )
    return b"".join(
        parts
    ) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def test_archive_upload_names_with_nothing_left_after_cleaning_are_refused(world):
    api = _api(world["owner"])
    url = f"/api/v1/datasets/{world['dataset'].pk}/archive/"
    problems = []
    for file_name in ("..", ".", "", "../..", "/"):
        body, content_type = _multipart({}, "archive", file_name, _zip({"a": b"x"}))
        outcome = probe(
            lambda b=body, c=content_type: api.generic("POST", url, b, content_type=c),
            world["dataset"],
        )
        problems += _problems_of_answer(outcome, True, repr(file_name))
    assert not problems, "\n".join(problems)


def test_a_nul_in_an_uploaded_file_name_never_reaches_storage(world):
    """Django drops the NUL from an uploaded file's name; whatever is accepted holds none."""
    api = _api(world["owner"])
    body, content_type = _multipart({}, "archive", "evil\x00.zip", _zip({"a": b"x"}))
    url = f"/api/v1/datasets/{world['dataset'].pk}/archive/"
    response = api.generic("POST", url, body, content_type=content_type)
    assert response.status_code in (202, 400), response.content
    # (In Python: SQLite's LIKE stops at a NUL, so a __contains lookup would match anything.)
    assert all("\x00" not in a.file_name for a in ArchiveImport.objects.all())
    body, content_type = _multipart(
        {"model": str(world["model"].pk)}, "files", "a\x00b.safetensors", safetensors_bytes()
    )
    response = api.generic("POST", "/api/v1/model-versions/", body, content_type=content_type)
    assert response.status_code in (201, 400), response.content
    if response.status_code == 201:
        assert all("\x00" not in f["path"] for f in response.json()["files"])


def test_archives_over_the_limits_are_refused_at_upload(world, settings):
    api = _api(world["owner"])
    url = f"/api/v1/datasets/{world['dataset'].pk}/archive/"

    def send(payload):
        upload = SimpleUploadedFile("big.zip", payload)
        return probe(
            lambda: api.post(url, {"archive": upload}, format="multipart"), world["dataset"]
        )

    settings.GANTRY_ARCHIVE_MAX_BYTES = 1000  # unpacked
    outcome = send(_zip({"a": b"x" * 600, "b": b"y" * 600}))
    assert not refusal_problems(outcome), outcome.show()
    settings.GANTRY_ARCHIVE_MAX_BYTES = 10**9
    settings.GANTRY_ARCHIVE_MAX_FILES = 3
    outcome = send(_zip({f"f{i}": b"x" for i in range(4)}))
    assert not refusal_problems(outcome), outcome.show()
    settings.GANTRY_ARCHIVE_MAX_FILES = 100
    settings.GANTRY_TENANT_STORAGE_QUOTA_GB = 0.000001  # the archive itself is over the quota
    outcome = send(_zip({"a": bytes(range(256)) * 20}))
    assert not refusal_problems(outcome), outcome.show()


def test_image_build_files_over_the_size_limit_leave_nothing_behind(world, monkeypatch):
    from images import services as image_services

    monkeypatch.setattr(image_services, "MAX_BUILD_FILE_BYTES", 100)  # not a setting: 50 MB
    api = _api(world["owner"])
    body = {
        **BASES[("post", "/api/v1/image-builds/")].body(world),
        "files": [
            SimpleUploadedFile("small.txt", b"x" * 10),
            SimpleUploadedFile("big.bin", b"x" * 200),
        ],
    }
    outcome = probe(lambda: api.post("/api/v1/image-builds/", body, format="multipart"))
    assert not refusal_problems(outcome), outcome.show()


def test_uploaded_file_names_cannot_place_files_outside_their_folder(world):
    """Model files are named by the upload. Django keeps only the printable characters of
    a name's last part; what is left is refused when it is no file name, and a stored
    name is always one plain name."""
    api = _api(world["owner"])
    problems = []
    for file_name in (
        "..",
        ".",
        "../../../etc/evil.safetensors",
        "..\\..\\evil.safetensors",
        "\u202eevil.safetensors",
        "line\x1bbreak.safetensors",
    ):
        body, content_type = _multipart(
            {"model": str(world["model"].pk)}, "files", file_name, safetensors_bytes()
        )
        send = lambda b=body, c=content_type: api.generic(  # noqa: E731
            "POST", "/api/v1/model-versions/", b, content_type=c
        )
        outcome = probe(send)
        if outcome.status == 201:
            paths = [f["path"] for f in outcome.json()["files"]]
            if any("/" in p or "\\" in p or not p.isprintable() or p in (".", "..") for p in paths):
                problems.append(f"{file_name!r}: stored as {paths}")
            new = [c.removeprefix("new file ") for c in outcome.changes if c.startswith("new file")]
            stored = [default_storage.path(f"models/{world['model'].pk}") + "/" in p for p in new]
            if not new or not all(stored):
                problems.append(f"{file_name!r}: wrote {new}")
        else:
            problems += _problems_of_answer(outcome, True, repr(file_name))
    assert not problems, "\n".join(problems)
