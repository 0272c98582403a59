"""Predict digits with a model saved by train_digits.py or train_digits_ddp.py.

    python examples/predict_digits.py --model outputs/model.pt
    python examples/predict_digits.py --model model.pt --input images.csv

Without --input it predicts the fixed test split of scikit-learn's digits. An
--input CSV has one image per row: 64 pixel values (0..16, row by row), an
optional header line, and optionally a `label` column (or a 65th value), with
which accuracy is reported. Writes predictions.csv (and predict_meta.json with the accuracy
when labels are known) to $GANTRY_OUTPUTS_DIR (./outputs by hand).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

try:  # `make run` installs no PyTorch: `make examples` adds it and scikit-learn.
    import numpy as np
except ImportError as missing:
    sys.exit(f"{missing}: this example needs PyTorch and scikit-learn; run `make examples`.")
import torch
from digits_common import PIXELS, DigitsNet, digits_split, outputs_dir, to_images, write_json

try:  # Gantry's in-job API (pip install ./executor); outside a job it prints the metrics.
    from executor import log_metric
except ImportError:
    from digits_common import log_metric


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model.pt (a DigitsNet state_dict)")
    parser.add_argument("--input", default=None, help="CSV of images; default: the test split")
    parser.add_argument("--batch-size", type=int, default=256)
    return parser.parse_args(argv)


def read_csv(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """Pixels (N, 64) and labels (N,) or None."""
    with path.open(newline="") as handle:
        rows = [row for row in csv.reader(handle) if row]
    if not rows:
        raise SystemExit(f"{path}: no rows")
    label_column = None
    try:
        float(rows[0][0])
    except ValueError:  # a header line
        header = [name.strip().lower() for name in rows.pop(0)]
        if "label" in header:
            label_column = header.index("label")
    if label_column is None and len(rows[0]) == PIXELS + 1:
        label_column = PIXELS
    pixels, labels = [], []
    for number, row in enumerate(rows, start=2 if label_column is not None else 1):
        values = [float(value) for value in row]
        if label_column is not None:
            labels.append(int(values.pop(label_column)))
        if len(values) != PIXELS:
            raise SystemExit(f"{path}, row {number}: {len(values)} pixel values, expected {PIXELS}")
        pixels.append(values)
    return np.asarray(pixels, dtype=np.float32), (
        np.asarray(labels, dtype=np.int64) if label_column is not None else None
    )


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.input:
        pixels, labels = read_csv(Path(args.input))
        source = args.input
    else:
        _, _, pixels, labels = digits_split()
        source = "the digits test split"

    model = DigitsNet()
    model.load_state_dict(torch.load(args.model, weights_only=True))
    model.eval()
    predictions, confidences = [], []
    with torch.no_grad():
        for start in range(0, len(pixels), args.batch_size):
            probabilities = model(to_images(pixels[start : start + args.batch_size])).softmax(1)
            confidence, predicted = probabilities.max(dim=1)
            predictions.extend(predicted.tolist())
            confidences.extend(confidence.tolist())

    out = outputs_dir()
    with (out / "predictions.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["index", "prediction", "confidence"] + (["label"] if labels is not None else [])
        )
        for index, (predicted, confidence) in enumerate(zip(predictions, confidences, strict=True)):
            row = [index, predicted, f"{confidence:.4f}"]
            if labels is not None:
                row.append(int(labels[index]))
            writer.writerow(row)
    print(f"predicted {len(predictions)} images from {source}: {out / 'predictions.csv'}")

    if labels is not None:
        accuracy = float((np.asarray(predictions) == labels).mean())
        log_metric("accuracy", accuracy)
        write_json(
            out / "predict_meta.json",
            {
                "model": str(args.model),
                "input": source,
                "images": len(predictions),
                "accuracy": accuracy,
            },
        )
        print(f"accuracy: {accuracy:.4f} ({int(round(accuracy * len(labels)))}/{len(labels)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
