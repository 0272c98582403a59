"""The digits CNN trained with DistributedDataParallel (gloo, CPU): a Gantry `distributed` job.

Started by the torchrun environment contract: MASTER_ADDR, MASTER_PORT, WORLD_SIZE,
RANK and LOCAL_RANK. Gantry sets them for each worker of a distributed job, and
torchrun sets them by hand:

    torchrun --nproc-per-node 2 examples/train_digits_ddp.py --epochs 10

Each rank trains on its own shard (DistributedSampler); gradients are averaged
by DDP. Rank 0 logs the metrics (averaged over all ranks) and saves model.pt and
meta.json to $GANTRY_OUTPUTS_DIR; the file is a plain state_dict, the same as
train_digits.py writes, so predict_digits.py reads either. Rank 0 saves a Gantry
checkpoint every --checkpoint-every steps and when asked to stop; a requeued, retried
or resumed job loads $GANTRY_RESUME_FROM on every rank (each rank's executor stages it).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from datetime import timedelta

try:  # `make run` installs no PyTorch: `make examples` adds it and scikit-learn.
    import torch
except ImportError as missing:
    sys.exit(f"{missing}: this example needs PyTorch and scikit-learn; run `make examples`.")
import torch.distributed as dist
from digits_common import DigitsNet, StopFlag, digits_split, outputs_dir, to_images, write_json
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

try:  # Gantry's in-job API (pip install ./executor); outside a job it prints the metrics.
    from executor import log_metric
except ImportError:
    from digits_common import log_metric
from train_digits import resume_path, save_checkpoint


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps (0: only on stop)")
    return parser.parse_args(argv)


def all_sum(*values: float) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()


def main(argv=None) -> int:
    args = parse_args(argv)
    stop = StopFlag()
    for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"):
        if name not in os.environ:
            print(
                f"{name} is not set: start this script with torchrun or as a Gantry "
                "distributed job",
                file=sys.stderr,
            )
            return 2
    # env:// reads MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK.
    dist.init_process_group("gloo", timeout=timedelta(minutes=5))
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    tag = f"[rank {rank}/{world}]"
    print(f"{tag} started (local rank {local_rank}, pid {os.getpid()})", flush=True)
    # The ranks share the machine's cores: split them rather than oversubscribe.
    torch.set_num_threads(max(1, min(torch.get_num_threads(), (os.cpu_count() or 1) // world)))

    torch.manual_seed(args.seed)  # the same initial weights on every rank
    x_train, y_train, x_test, y_test = digits_split()
    train = TensorDataset(to_images(x_train), torch.as_tensor(y_train))
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    # Each rank scores its own slice of the test split; the counts are summed.
    test_images = to_images(x_test[rank::world])
    test_labels = torch.as_tensor(y_test[rank::world])

    model = DistributedDataParallel(DigitsNet())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    started = time.monotonic()
    first_epoch, step = 1, 0
    resume = resume_path(None)
    if resume:  # every rank loads the same checkpoint: the replicas stay identical
        saved = torch.load(resume, weights_only=True)
        model.module.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        first_epoch, step = saved["epoch"], saved["step"]
        print(f"{tag} resumed from {resume} at epoch {first_epoch}, step {step}", flush=True)

    def state(epoch: int) -> dict:
        return {
            "model": model.module.state_dict(),
            "optimizer": optimizer.state_dict(),
            "epoch": epoch,
            "step": step,
        }

    val_loss = val_accuracy = float("nan")
    try:
        for epoch in range(first_epoch, args.epochs + 1):
            sampler.set_epoch(epoch)
            seen = correct = 0
            loss_sum = 0.0
            for images, labels in loader:
                # Every rank must stop at the same step, or the others hang in all_reduce.
                (stopping,) = all_sum(float(stop.is_set()))
                if stopping:
                    if rank == 0:
                        path = outputs_dir() / "checkpoint.pt"
                        torch.save(state(epoch), path)
                        save_checkpoint(state(epoch), step, loss_sum / max(seen, 1))
                        print(f"{tag} stop requested: saved {path} at step {step}", flush=True)
                    else:
                        print(f"{tag} stop requested at step {step}", flush=True)
                    return 0
                logits = model(images)
                loss = nn.functional.cross_entropy(logits, labels)
                optimizer.zero_grad()
                loss.backward()  # DDP averages the gradients over the ranks here
                optimizer.step()
                step += 1
                (mean_loss,) = all_sum(loss.item() / world)
                if rank == 0:
                    log_metric("loss", mean_loss, step=step)
                    if args.checkpoint_every and step % args.checkpoint_every == 0:
                        save_checkpoint(state(epoch), step, mean_loss)
                seen += len(labels)
                correct += (logits.argmax(dim=1) == labels).sum().item()
                loss_sum += loss.item() * len(labels)

            model.eval()
            with torch.no_grad():
                logits = model.module(test_images)
                test_loss = nn.functional.cross_entropy(logits, test_labels, reduction="sum")
                test_correct = (logits.argmax(dim=1) == test_labels).sum().item()
            model.train()
            totals = all_sum(seen, correct, loss_sum, len(test_labels), test_correct, test_loss)
            seen, correct, loss_sum, tested, test_correct, test_loss = totals
            val_loss, val_accuracy = test_loss / tested, test_correct / tested
            print(
                f"{tag} epoch {epoch}/{args.epochs}: train_loss={loss_sum / seen:.4f} "
                f"train_accuracy={correct / seen:.3f} val_loss={val_loss:.4f} "
                f"val_accuracy={val_accuracy:.3f}",
                flush=True,
            )
            if rank == 0:
                log_metric("train_loss", loss_sum / seen, step=step)
                log_metric("train_accuracy", correct / seen, step=step)
                log_metric("val_loss", val_loss, step=step)
                log_metric("val_accuracy", val_accuracy, step=step)

        if rank == 0:
            out = outputs_dir()
            torch.save(model.module.state_dict(), out / "model.pt")
            write_json(
                out / "meta.json",
                {
                    "architecture": "DigitsNet",
                    "input": "8x8 grey image, pixels 0..16, divided by 16",
                    "classes": list(range(10)),
                    "hyperparameters": {
                        "epochs": args.epochs,
                        "lr": args.lr,
                        "batch_size_per_rank": args.batch_size,
                        "seed": args.seed,
                    },
                    "world_size": world,
                    "steps": step,
                    "val_loss": val_loss,
                    "val_accuracy": val_accuracy,
                    "train_seconds": round(time.monotonic() - started, 3),
                    "torch": torch.__version__,
                },
            )
            print(f"{tag} saved {out / 'model.pt'} and {out / 'meta.json'}", flush=True)
        # Nobody leaves before rank 0 has saved: a job is done when every worker is.
        dist.barrier()
        print(f"{tag} done", flush=True)
        return 0
    finally:
        # DDP's reducer holds the process group, and DDP keeps itself alive in reference
        # cycles: free it now, so the group's Gloo threads stop here and not during
        # interpreter shutdown, where they sometimes abort the process (SIGABRT,
        # "terminate called without an active exception", about 1 run in 60 here).
        model = optimizer = None
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
