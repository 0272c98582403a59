"""What the digits examples share: the data split, the network and the output files.

scikit-learn ships the digits data set (1,797 8x8 grey images of 0-9), so the
examples run offline in seconds on a CPU. The test split is fixed (seed 0) so
that `predict_digits.py` scores a model on images it was not trained on,
whatever `--seed` the training run used.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn

try:
    from executor import log_metric, preemption_requested
except ImportError:  # run by hand where the Gantry executor is not installed

    def log_metric(name: str, value: float, step: int | None = None) -> None:
        suffix = "" if step is None else f" step={step}"
        print(f"[metric] {name}={float(value)}{suffix}", flush=True)

    def preemption_requested() -> bool:
        return False


PIXELS = 64  # 8 x 8
CLASSES = 10
PIXEL_MAX = 16.0  # load_digits() pixels are 0..16
SPLIT_SEED = 0
TEST_FRACTION = 0.2


def digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test) with pixels as float32 in 0..16."""
    digits = load_digits()
    x = digits.data.astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED, stratify=y
    )
    return x_train, y_train, x_test, y_test


def to_images(pixels: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Rows of 64 raw pixel values -> normalised (N, 1, 8, 8) tensor."""
    tensor = torch.as_tensor(pixels, dtype=torch.float32)
    return (tensor / PIXEL_MAX).reshape(-1, 1, 8, 8)


class DigitsNet(nn.Module):
    """Two 3x3 convolutions and a small classifier: ~12k parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),  # 8x8 -> 4x4
            nn.Conv2d(16, 32, kernel_size=3, padding=1),
            nn.ReLU(),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(32 * 4 * 4, 64),
            nn.ReLU(),
            nn.Linear(64, CLASSES),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class RawDigits(nn.Module):
    """A trained DigitsNet for serving: it takes rows of 64 raw pixel values (0..16), as
    predict_digits.py's CSV has them, and does to_images' normalisation itself, so its
    TorchScript file (model.torchscript.pt) runs without this code. Its answer is the
    ten class scores (logits) of each row."""

    def __init__(self, net: DigitsNet) -> None:
        super().__init__()
        self.net = net
        self.pixels = PIXELS  # attributes: TorchScript does not read module globals
        self.pixel_max = PIXEL_MAX

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        if pixels.dim() != 2 or pixels.shape[1] != self.pixels:
            raise ValueError(
                f"expected rows of {self.pixels} pixel values (0..16), "
                f"got a tensor of shape {list(pixels.shape)}"
            )
        return self.net((pixels / self.pixel_max).reshape(-1, 1, 8, 8))


def outputs_dir() -> Path:
    """Gantry uploads everything under $GANTRY_OUTPUTS_DIR; by hand it is ./outputs."""
    path = Path(os.environ.get("GANTRY_OUTPUTS_DIR") or "outputs")
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


class StopFlag:
    """Set by SIGTERM/SIGINT. Gantry creates the preemption file and then sends SIGTERM
    to the whole process group, so the default handler would kill the script before
    its loop could notice the file: the handler only records the request and the
    loop checkpoints at the next step."""

    def __init__(self) -> None:
        self.signalled = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        self.signalled = True

    def is_set(self) -> bool:
        return self.signalled or preemption_requested()
