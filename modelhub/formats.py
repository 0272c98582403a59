"""Tell a model's format from its file names and first bytes (nothing is unpickled or loaded)."""

from __future__ import annotations

import json
import struct
import zipfile
from collections.abc import Callable
from typing import BinaryIO

from modelhub.models import ModelFormat

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
ZIP_MAGIC = b"PK\x03\x04"
KNOWN = (
    "safetensors (.safetensors), PyTorch (.pt/.pth), TorchScript (.pt zip with code/), "
    "ONNX (.onnx), TensorFlow SavedModel (saved_model.pb), Keras (.keras/.h5), "
    "MXNet (.params + -symbol.json), MLflow (MLmodel)"
)


class UnknownFormat(ValueError):
    pass


def _looks_like_safetensors(head: bytes) -> bool:
    if len(head) < 9:
        return False
    (length,) = struct.unpack("<Q", head[:8])
    return 0 < length < 100_000_000 and head[8:9] == b"{"


Opener = Callable[[], BinaryIO]


def _head(opener: Opener, n: int) -> bytes:
    with opener() as handle:
        return handle.read(n)


def _is_torchscript(opener: Opener) -> bool:
    """TorchScript archives are zips holding `<name>/code/` and `<name>/constants.pkl`;
    torch.save's zips hold `data.pkl` without them."""
    if _head(opener, 4) != ZIP_MAGIC:
        return False
    try:
        with opener() as handle, zipfile.ZipFile(handle) as archive:
            names = archive.namelist()
    except zipfile.BadZipFile:
        return False
    return any(n.endswith("/constants.pkl") or "/code/" in n for n in names)


def detect_format(files: dict[str, Opener]) -> tuple[str, str]:
    """(format, primary file path) for a version's files.

    `files` maps each relative path to a function opening it (binary, seekable); only
    the few files whose content decides are opened, and only their first bytes read. Raises UnknownFormat with the list
    of formats Gantry knows.
    """
    paths = sorted(files)
    names = {p: p.rsplit("/", 1)[-1].lower() for p in paths}

    # MLflow models describe themselves (and may hold any of the files below): first.
    if "MLmodel" in paths:
        return ModelFormat.MLFLOW, "MLmodel"

    for path in paths:
        if names[path] in ("saved_model.pb", "saved_model.pbtxt"):
            return ModelFormat.TF_SAVEDMODEL, path
    for path in paths:
        if names[path].endswith(".safetensors"):
            if not _looks_like_safetensors(_head(files[path], 9)):
                raise UnknownFormat(f"{path} is named .safetensors but has no safetensors header.")
            return ModelFormat.SAFETENSORS, path
    for path in paths:
        if names[path].endswith(".onnx"):
            return ModelFormat.ONNX, path
    for path in paths:
        if names[path].endswith(".keras"):
            if _head(files[path], 4) != ZIP_MAGIC:
                raise UnknownFormat(f"{path} is named .keras but is not a Keras zip archive.")
            return ModelFormat.KERAS, path
        if names[path].endswith((".h5", ".hdf5")):
            if _head(files[path], 8) != HDF5_MAGIC:
                raise UnknownFormat(f"{path} is named {names[path]} but is not an HDF5 file.")
            return ModelFormat.KERAS, path
    params = [p for p in paths if names[p].endswith(".params")]
    symbols = [p for p in paths if names[p].endswith("-symbol.json")]
    if params and symbols:
        try:
            json.loads(_head(files[symbols[0]], 50_000_000))
        except ValueError as exc:
            raise UnknownFormat(f"{symbols[0]} is not JSON, so not an MXNet symbol file.") from exc
        return ModelFormat.MXNET, params[0]
    if params:
        raise UnknownFormat(
            f"{params[0]} looks like MXNet weights, but there is no -symbol.json next to it."
        )
    for path in paths:
        if names[path].endswith((".pt", ".pth", ".pt2")):
            if _is_torchscript(files[path]):
                return ModelFormat.TORCHSCRIPT, path
            return ModelFormat.PYTORCH, path
    shown = ", ".join(paths[:8]) + ("…" if len(paths) > 8 else "") or "no files"
    raise UnknownFormat(f"Unknown model format ({shown}). Gantry knows: {KNOWN}.")
