"""Train a small CNN on scikit-learn's digits: a Gantry `train` job in about ten seconds.

    python examples/train_digits.py --epochs 10 --lr 0.003 --batch-size 64 --seed 1

Writes model.pt (a state_dict), model.torchscript.pt (the trained network as
TorchScript, on the CPU in eval mode: rows of 64 raw pixel values in, ten class scores
out; what a model endpoint serves) and meta.json to $GANTRY_OUTPUTS_DIR (./outputs by
hand), logs loss and accuracy through Gantry's metric API, and saves a Gantry
checkpoint (checkpoint.pt: model, optimizer, epoch, step) every --checkpoint-every steps
and when Gantry asks the job to stop (cancel, timeout, preemption: then it exits 0). A
requeued, retried or resumed job goes on from $GANTRY_RESUME_FROM (the latest complete
checkpoint, staged by the executor); by hand, `--resume outputs/checkpoint.pt`.

Where the `tensorboard` package is installed (`make run` installs it with Gantry), the
same scalars also go to TensorBoard event files under --tensorboard-dir (`runs/`,
relative to the working directory: in a Gantry job, rank 0's, where the job page looks
for them and then offers "Open TensorBoard"). Without it the example trains all the same.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

try:  # `make run` installs no PyTorch: `make examples` adds it and scikit-learn.
    import torch
except ImportError as missing:
    sys.exit(f"{missing}: this example needs PyTorch and scikit-learn; run `make examples`.")
from digits_common import (
    DigitsNet,
    RawDigits,
    StopFlag,
    digits_split,
    outputs_dir,
    to_images,
    write_json,
)
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

try:  # Gantry's in-job API (pip install ./executor); outside a job it prints the metrics.
    from executor import checkpoint, log_metric, resume_from
except ImportError:
    from digits_common import log_metric

    def checkpoint(path, step=None, metrics=None):
        return None

    def resume_from():
        return None


def save_checkpoint(state: dict, step: int, loss: float) -> None:
    """One Gantry checkpoint (uploaded by the executor; nothing outside Gantry)."""
    folder = Path(tempfile.mkdtemp(prefix="digits-ckpt-"))
    try:
        torch.save(state, folder / "checkpoint.pt")
        checkpoint(str(folder), step=step, metrics={"loss": loss})
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class Scalars:
    """Gantry's metrics and, where `tensorboard` is installed, TensorBoard event files."""

    def __init__(self, logdir: str) -> None:
        self.writer = None
        if not logdir:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as missing:  # torch raises it when tensorboard is not installed
            print(f"no TensorBoard event files: {missing}", flush=True)
            return
        self.writer = SummaryWriter(logdir)

    def log(self, name: str, value: float, step: int) -> None:
        log_metric(name, value, step=step)
        if self.writer is not None:
            self.writer.add_scalar(name, value, global_step=step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def resume_path(given: str | None) -> str | None:
    staged = resume_from()
    if given or not staged:
        return given
    path = os.path.join(staged, "checkpoint.pt")
    return path if os.path.exists(path) else None


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--resume", default=None, help="a checkpoint.pt written on preemption")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps (0: only on stop)")
    parser.add_argument(
        "--tensorboard-dir", default="runs", help="TensorBoard event files ('': none)"
    )
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
    scalars = Scalars(args.tensorboard_dir)
    try:
        return train(args, scalars)
    finally:
        scalars.close()


def train(args: argparse.Namespace, scalars: Scalars) -> int:
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
    resume = resume_path(args.resume)
    if resume:
        saved = torch.load(resume, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        # A checkpoint taken mid-epoch repeats that epoch: simpler than restoring the sampler.
        first_epoch, step = saved["epoch"], saved["step"]
        print(f"resumed from {resume} at epoch {first_epoch}, step {step}", flush=True)

    def state(epoch: int) -> dict:
        return {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "epoch": epoch,
            "step": step,
        }
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
                torch.save(state(epoch), path)
                save_checkpoint(state(epoch), step, loss_sum / max(seen, 1))
                print(f"stop requested: saved {path} at epoch {epoch}, step {step}", flush=True)
                return 0
            logits = model(images)
            loss = nn.functional.cross_entropy(logits, labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            scalars.log("loss", loss.item(), step)
            seen += len(labels)
            correct += (logits.argmax(dim=1) == labels).sum().item()
            loss_sum += loss.item() * len(labels)
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                save_checkpoint(state(epoch), step, loss.item())

        val_loss, val_accuracy = evaluate(model, test_images, test_labels)
        scalars.log("train_loss", loss_sum / seen, step)
        scalars.log("train_accuracy", correct / seen, step)
        scalars.log("val_loss", val_loss, step)
        scalars.log("val_accuracy", val_accuracy, step)
        print(
            f"epoch {epoch}/{args.epochs}: train_loss={loss_sum / seen:.4f} "
            f"train_accuracy={correct / seen:.3f} val_loss={val_loss:.4f} "
            f"val_accuracy={val_accuracy:.3f}",
            flush=True,
        )

    torch.save(model.state_dict(), out / "model.pt")
    # The same weights with their code, for serving without this file (examples/README.md).
    torch.jit.save(torch.jit.script(RawDigits(model).cpu().eval()), out / "model.torchscript.pt")
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
    print(
        f"saved {out / 'model.pt'}, {out / 'model.torchscript.pt'} and {out / 'meta.json'} "
        f"(val_accuracy={val_accuracy:.3f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
