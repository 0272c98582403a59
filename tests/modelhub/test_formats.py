import io
import zipfile
from contextlib import nullcontext

import pytest

from modelhub.formats import UnknownFormat, detect_format
from tests.modelhub.builders import safetensors_bytes


def _zip(names):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in names:
            archive.writestr(name, b"x")
    return buffer.getvalue()


def _files(mapping):
    return {path: (lambda d=data: nullcontext(io.BytesIO(d))) for path, data in mapping.items()}


@pytest.mark.parametrize(
    "files,expected,primary",
    [
        (
            {"model.safetensors": safetensors_bytes(), "config.json": b"{}"},
            "safetensors",
            "model.safetensors",
        ),
        ({"model.pt": _zip(["archive/data.pkl", "archive/version"])}, "pytorch", "model.pt"),
        ({"weights.pth": b"\x80\x02legacy pickle"}, "pytorch", "weights.pth"),
        (
            {"traced.pt": _zip(["traced/code/__torch__.py", "traced/constants.pkl"])},
            "torchscript",
            "traced.pt",
        ),
        ({"model.onnx": b"\x08\x07onnx"}, "onnx", "model.onnx"),
        (
            {"export/saved_model.pb": b"pb", "export/variables/variables.index": b""},
            "tf-savedmodel",
            "export/saved_model.pb",
        ),
        ({"model.keras": _zip(["config.json"])}, "keras", "model.keras"),
        ({"model.h5": b"\x89HDF\r\n\x1a\n...."}, "keras", "model.h5"),
        (
            {"net-0010.params": b"p", "net-symbol.json": b'{"nodes": []}'},
            "mxnet",
            "net-0010.params",
        ),
    ],
)
def test_formats_are_detected_from_names_and_magic(files, expected, primary):
    assert detect_format(_files(files)) == (expected, primary)


@pytest.mark.parametrize(
    "files,message",
    [
        ({"notes.txt": b"hi", "data.csv": b"1,2"}, "Unknown model format"),
        ({"model.safetensors": b"not really"}, "no safetensors header"),
        ({"model.h5": b"plain text"}, "not an HDF5 file"),
        ({"net-0001.params": b"p"}, "no -symbol.json"),
        ({"m.params": b"p", "m-symbol.json": b"{oops"}, "not JSON"),
    ],
)
def test_unknown_or_broken_formats_are_refused_with_a_reason(files, message):
    with pytest.raises(UnknownFormat, match=message):
        detect_format(_files(files))
