"""Train a classifier on scikit-learn's digits with MLflow calls only: no Gantry import.

    python examples/mlflow_digits.py --epochs 5 --alpha 0.0001

Run as a Gantry job, it logs into the job's own run (the executor sets
MLFLOW_TRACKING_URI, MLFLOW_TRACKING_TOKEN, MLFLOW_RUN_ID and MLFLOW_EXPERIMENT_ID), and
its loss and accuracy are the job's metrics, drawn live on the job page. By hand, it
logs wherever MLFLOW_TRACKING_URI points (a local ./mlruns without one).
"""

from __future__ import annotations

import argparse

import mlflow
import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import SGDClassifier
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--alpha", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    x, y = load_digits(return_X_y=True)
    x = x / 16.0
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    classes = np.unique(y)
    model = SGDClassifier(loss="log_loss", alpha=args.alpha, random_state=args.seed)

    with mlflow.start_run() as run:
        mlflow.log_params({"epochs": args.epochs, "alpha": args.alpha, "seed": args.seed})
        mlflow.set_tag("model", "SGDClassifier")
        for epoch in range(args.epochs):
            model.partial_fit(x_train, y_train, classes=classes)
            loss = log_loss(y_test, model.predict_proba(x_test), labels=classes)
            accuracy = accuracy_score(y_test, model.predict(x_test))
            mlflow.log_metrics({"loss": loss, "accuracy": accuracy}, step=epoch)
            print(f"epoch {epoch}: loss {loss:.4f} accuracy {accuracy:.4f}", flush=True)
        print(f"run {run.info.run_id} in experiment {run.info.experiment_id}", flush=True)


if __name__ == "__main__":
    main()
