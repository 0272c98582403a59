"""Train a small CNN on scikit-learn's digits: a Gantry `train` job in about ten seconds.

    python examples/train_digits.py --epochs 10 --lr 0.003 --batch-size 64 --seed 1

Writes model.pt (a state_dict) and meta.json to $GANTRY_OUTPUTS_DIR (./outputs by
hand), logs loss and accuracy through Gantry's metric API, and when Gantry asks the
job to stop (cancel, timeout, preemption) saves checkpoint.pt and exits 0;
`--resume outputs/checkpoint.pt` goes on from there.
"""

from __future__ import annotations

import argparse
import sys
import time

try:  # `make run` installs no PyTorch: `make examples` adds it and scikit-learn.
    import torch
except ImportError as missing:
    sys.exit(f"{missing}: this example needs PyTorch and scikit-learn; run `make examples`.")
from digits_common import DigitsNet, StopFlag, digits_split, outputs_dir, to_images, write_json
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:  # Gantry's in-job API (pip install ./executor); outside a job it prints the metrics.
    from executor import log_metric
except ImportError:
    from digits_common import log_metric


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--resume", default=None, help="a checkpoint.pt written on preemption")
    return parser.parse_args(argv)


def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor) -> tuple[float, float]:
    model.eval()
    with torch.no_grad():
        logits = model(images)
        loss = nn.functional.cross_entropy(logits, labels).item()
        accuracy = (logits.argmax(dim=1) == labels).float().mean().item()
    model.train()
    return loss, accuracy


def main(argv=None) -> int:
    args = parse_args(argv)
    stop = StopFlag()
    torch.manual_seed(args.seed)
    out = outputs_dir()

    x_train, y_train, x_test, y_test = digits_split()
    train = TensorDataset(to_images(x_train), torch.as_tensor(y_train))
    test_images, test_labels = to_images(x_test), torch.as_tensor(y_test)
    loader = DataLoader(train, batch_size=args.batch_size, shuffle=True)

    model = DigitsNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    first_epoch, step = 1, 0
    if args.resume:
        checkpoint = torch.load(args.resume, weights_only=True)
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        # A checkpoint taken mid-epoch repeats that epoch: simpler than restoring the sampler.
        first_epoch, step = checkpoint["epoch"], checkpoint["step"]
        print(f"resumed from {args.resume} at epoch {first_epoch}, step {step}", flush=True)
    print(
        f"training DigitsNet on {len(train)} images, testing on {len(test_labels)}: "
        f"epochs={args.epochs} lr={args.lr} batch_size={args.batch_size} seed={args.seed}",
        flush=True,
    )

    started = time.monotonic()
    val_loss = val_accuracy = float("nan")
    for epoch in range(first_epoch, args.epochs + 1):
        seen = correct = 0
        loss_sum = 0.0
        for images, labels in loader:
            if stop.is_set():
                path = out / "checkpoint.pt"
                torch.save(
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "epoch": epoch,
                        "step": step,
                    },
                    path,
                )
                print(f"stop requested: saved {path} at epoch {epoch}, step {step}", flush=True)
                return 0
            logits = model(images)
            loss = nn.functional.cross_entropy(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            log_metric("loss", loss.item(), step=step)
            seen += len(labels)
            correct += (logits.argmax(dim=1) == labels).sum().item()
            loss_sum += loss.item() * len(labels)

        val_loss, val_accuracy = evaluate(model, test_images, test_labels)
        log_metric("train_loss", loss_sum / seen, step=step)
        log_metric("train_accuracy", correct / seen, step=step)
        log_metric("val_loss", val_loss, step=step)
        log_metric("val_accuracy", val_accuracy, step=step)
        print(
            f"epoch {epoch}/{args.epochs}: train_loss={loss_sum / seen:.4f} "
            f"train_accuracy={correct / seen:.3f} val_loss={val_loss:.4f} "
            f"val_accuracy={val_accuracy:.3f}",
            flush=True,
        )

    torch.save(model.state_dict(), out / "model.pt")
    write_json(
        out / "meta.json",
        {
            "architecture": "DigitsNet",
            "input": "8x8 grey image, pixels 0..16, divided by 16",
            "classes": list(range(10)),
            "hyperparameters": {
                "epochs": args.epochs,
                "lr": args.lr,
                "batch_size": args.batch_size,
                "seed": args.seed,
            },
            "steps": step,
            "val_loss": val_loss,
            "val_accuracy": val_accuracy,
            "train_seconds": round(time.monotonic() - started, 3),
            "torch": torch.__version__,
        },
    )
    print(f"saved {out / 'model.pt'} and {out / 'meta.json'} (val_accuracy={val_accuracy:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
