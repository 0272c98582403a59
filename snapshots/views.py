"""The snapshot page: a file browser (folders, a file's text, downloads)."""

from __future__ import annotations

import mimetypes

from django.core.files.storage import default_storage
from django.http import FileResponse, Http404, HttpResponseRedirect, StreamingHttpResponse

from core.views import GantryView, ObjectDetailView
from datasets import storage
from datasets.downloads import _zip_stream
from datasets.models import blob_key
from projects.views import PROJECT_CONTENTS
from snapshots.models import CodeSnapshot, SnapshotFile

TEXT_BYTES = 256 * 1024


def _folder(path: str) -> str:
    return path.strip("/") + "/" if path.strip("/") else ""


def listing(snapshot: CodeSnapshot, folder: str) -> tuple[list[dict], list[SnapshotFile]]:
    """The subfolders (name, files, bytes) and files directly inside `folder`."""
    rows = snapshot.files.filter(path__startswith=folder).order_by("path")
    folders: dict[str, dict] = {}
    files = []
    for f in rows.only("path", "size", "mode", "sha256", "blob_id"):
        rest = f.path[len(folder):]
        if "/" in rest:
            name = rest.split("/", 1)[0]
            entry = folders.setdefault(name, {"name": name, "path": folder + name, "files": 0, "size": 0})
            entry["files"] += 1
            entry["size"] += f.size
        else:
            files.append(f)
    return list(folders.values()), files


def text_of(file: SnapshotFile) -> dict:
    """The head of a text file for the page, or why it is not shown."""
    if file.blob_id is None:
        return {"kind": "missing"}
    with default_storage.open(blob_key(file.blob_id), "rb") as fh:
        head = fh.read(TEXT_BYTES)
    if b"\x00" in head:
        return {"kind": "binary"}
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not just a character cut at the end
            return {"kind": "binary"}
        text = head[: exc.start].decode("utf-8")
    return {"kind": "text", "text": text, "truncated": file.size > TEXT_BYTES}


class SnapshotDetailView(ObjectDetailView):
    model = CodeSnapshot
    permission_action = "snapshot.view"
    template_name = "snapshots/snapshot_detail.html"

    def get_extra_context(self, snapshot):
        path = self.request.GET.get("path", "").strip("/")
        file = snapshot.files.filter(path=path).first() if path else None
        if file is not None:
            folder = _folder(path.rsplit("/", 1)[0] if "/" in path else "")
            return {"file": file, "content": text_of(file), "crumbs": _crumbs(folder), "path": path}
        folder = _folder(path)
        folders, files = listing(snapshot, folder)
        if folder and not folders and not files:
            raise Http404("No such folder in this snapshot.")
        return {
            "folders": folders,
            "files": files,
            "crumbs": _crumbs(folder),
            "path": path,
            "jobs": snapshot.jobs.order_by("-created_at")[:10],
        }


def _crumbs(folder: str) -> list[tuple[str, str]]:
    parts = [p for p in folder.split("/") if p]
    return [(p, "/".join(parts[: i + 1])) for i, p in enumerate(parts)]


class SnapshotDownloadView(GantryView):
    """One file (`?path=`), or the whole snapshot as a zip."""

    model = CodeSnapshot
    permission_action = "snapshot.view"

    def get(self, request, *args, **kwargs):
        snapshot = self.get_object()
        path = request.GET.get("path", "")
        if not path:
            if not snapshot.is_ready:
                raise Http404("The snapshot is still uploading.")
            response = StreamingHttpResponse(_zip_stream(snapshot), content_type="application/zip")
            response["Content-Disposition"] = f'attachment; filename="code-{snapshot.pk}.zip"'
            return response
        file = snapshot.files.filter(path=path, blob__isnull=False).first()
        if file is None:
            raise Http404("No such file in this snapshot.")
        if storage.is_s3():
            return HttpResponseRedirect(storage.presigned_get(blob_key(file.blob_id), file.name))
        response = FileResponse(
            default_storage.open(blob_key(file.blob_id), "rb"),
            as_attachment=True,
            filename=file.name,
            content_type=mimetypes.guess_type(file.name)[0] or "application/octet-stream",
        )
        response["Content-Security-Policy"] = "default-src 'none'; sandbox"
        return response


# Their files stay in the blob store only while a dataset or another snapshot holds them.
PROJECT_CONTENTS.append(("code snapshots", lambda project: project.code_snapshots.count()))
