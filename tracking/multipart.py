"""MLflow's presigned multipart upload (`/api/2.0/mlflow-artifacts/mpu/{create,complete,
abort}/<artifact folder>`), so an artifact's bytes go from the client straight to the
object store.

With `MLFLOW_ENABLE_PROXY_MULTIPART_UPLOAD=true` the client asks `create` for one
presigned part URL per chunk (`MLFLOW_MULTIPART_UPLOAD_CHUNK_SIZE`) of every file over
`MLFLOW_MULTIPART_UPLOAD_MINIMUM_FILE_SIZE`, PUTs the parts to the gateway itself, and
sends their ETags to `complete`; on a failure it calls `abort`. Gantry signs and
completes; it never carries the bytes. The folder is checked against its run (or logged
model) as the proxy routes check it. On the filesystem storage there is nothing to
presign: `create` answers MLflow's 501 NOT_IMPLEMENTED, and the client falls back to the
proxied PUT.
"""

from __future__ import annotations

import json
import posixpath

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from datasets import storage
from tracking.api.protocol import caller_for_request
from tracking.artifacts import _name, _owner, _safe
from tracking.errors import MlflowError, invalid

MAX_PARTS = 10_000  # S3's limit on one upload's parts
UNSUPPORTED = "Multipart upload is not supported for the current artifact repository"


def _request(request, folder: str) -> tuple[str, dict]:
    """The object's storage name (folder + the body's file name), checked for logging,
    and the request's body."""
    if request.method != "POST":
        raise MlflowError("Multipart uploads take POST.", "ENDPOINT_NOT_FOUND")
    caller = caller_for_request(request)
    folder = _safe(folder)
    if folder.startswith("registry/"):
        raise MlflowError("Registered versions are read-only here.", "PERMISSION_DENIED")
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, RecursionError):
        raise MlflowError("The request body is not valid JSON.", "BAD_REQUEST") from None
    if not isinstance(body, dict):
        raise MlflowError("The request body must be a JSON object.", "BAD_REQUEST")
    _owner(caller, folder, "experiment.log")
    file_name = body.get("path")
    if not isinstance(file_name, str) or not file_name.strip():
        raise invalid("Missing value for required parameter 'path'.")
    # MLflow takes the file's name only (clients before 3.18 sent the whole local path).
    file_name = _safe(posixpath.basename(file_name.replace("\\", "/")))
    if not file_name:
        raise invalid(f"Invalid file name '{body['path'][:200]}'.")
    return _name(f"{folder}/{file_name}"), body


def _upload_id(body) -> str:
    upload_id = body.get("upload_id")
    if not isinstance(upload_id, str) or not upload_id or len(upload_id) > 1024:
        raise invalid("Missing value for required parameter 'upload_id'.")
    return upload_id


def _parts(body) -> list[dict]:
    parts = body.get("parts")
    if not isinstance(parts, list) or not parts or len(parts) > MAX_PARTS:
        raise invalid(f"'parts' lists 1 to {MAX_PARTS} uploaded parts.")
    checked = []
    for part in parts:
        number = part.get("part_number") if isinstance(part, dict) else None
        etag = part.get("etag") if isinstance(part, dict) else None
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= MAX_PARTS:
            raise invalid("Every part has a part_number from 1 to 10000.")
        if not isinstance(etag, str) or not etag or len(etag) > 200:
            raise invalid(f"Part {number} has no etag.")
        checked.append({"PartNumber": number, "ETag": etag})
    return sorted(checked, key=lambda p: p["PartNumber"])


def _s3_call(what: str, call, **kwargs):
    from botocore.exceptions import ClientError

    try:
        return call(Bucket=storage.bucket(), **kwargs)
    except ClientError as exc:
        error = exc.response.get("Error", {})
        if error.get("Code") in ("NoSuchUpload", "InvalidPart", "InvalidPartOrder"):
            raise invalid(f"Could not {what}: {error.get('Message') or error['Code']}.") from None
        raise


def _view(handler):
    @csrf_exempt
    def view(request, path: str):
        try:
            name, body = _request(request, path)
            if not storage.is_s3():
                raise MlflowError(UNSUPPORTED, "NOT_IMPLEMENTED")
            return JsonResponse(handler(storage.s3_key(name), body))
        except MlflowError as exc:
            return exc.response()

    view.__name__ = handler.__name__
    return view


@_view
def mpu_create(key: str, body: dict) -> dict:
    num_parts = body.get("num_parts", 1)
    if isinstance(num_parts, str) and num_parts.isdigit():
        num_parts = int(num_parts)
    if isinstance(num_parts, bool) or not isinstance(num_parts, int):
        raise invalid("'num_parts' is a whole number.")
    if not 1 <= num_parts <= MAX_PARTS:
        raise invalid(f"'num_parts' is from 1 to {MAX_PARTS}.")
    client = storage.s3_client()
    upload = _s3_call("start the upload", client.create_multipart_upload, Key=key)
    upload_id = upload["UploadId"]
    credentials = [
        {
            "url": client.generate_presigned_url(
                "upload_part",
                Params={
                    "Bucket": storage.bucket(),
                    "Key": key,
                    "UploadId": upload_id,
                    "PartNumber": number,
                },
                ExpiresIn=storage.PRESIGN_SECONDS,
            ),
            "part_number": number,
            "headers": {},
        }
        for number in range(1, num_parts + 1)
    ]
    return {"upload_id": upload_id, "credentials": credentials}


@_view
def mpu_complete(key: str, body: dict) -> dict:
    upload_id, parts = _upload_id(body), _parts(body)
    client = storage.s3_client()
    _s3_call(
        "complete the upload",
        client.complete_multipart_upload,
        Key=key,
        UploadId=upload_id,
        MultipartUpload={"Parts": parts},
    )
    return {}


@_view
def mpu_abort(key: str, body: dict) -> dict:
    upload_id = _upload_id(body)
    _s3_call(
        "abort the upload", storage.s3_client().abort_multipart_upload, Key=key, UploadId=upload_id
    )
    return {}
