#!/usr/bin/env python
"""The API server's own request latency while bench/k8s_scale.py runs (its /metrics).

    python bench/k8s_scale_apilatency.py <cluster dir /tmp/gantry-k8s-*> <port> <out.json> [seconds]

Scrapes `apiserver_request_duration_seconds` (and the process's CPU seconds) every 15 s
from the started control plane, as an admin token of its tokens.csv, and writes the
p50/p99 (histogram quantiles, as Prometheus's histogram_quantile) of the requests served
between the first and the last scrape, by verb and resource, into JSON. On a machine where
Gantry, kwok and the control plane share 2 cores, it shows whether the API server itself
is slow (CPU-starved) rather than Gantry's own part.
"""

from __future__ import annotations

import json
import re
import ssl
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r'^apiserver_request_duration_seconds_bucket\{(?P<labels>[^}]*)\} (?P<v>\S+)$')
CPU = re.compile(r"^process_cpu_seconds_total (\S+)$", re.M)


def scrape(url: str, token: str, context) -> tuple[dict, float]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        text = response.read().decode()
    buckets: dict = defaultdict(float)
    for line in text.splitlines():
        match = LINE.match(line)
        if not match:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels.get("verb") == "WATCH":
            continue
        key = (labels.get("verb"), labels.get("resource"), float(labels["le"]))
        buckets[key] += float(match["v"])
    cpu = CPU.search(text)
    return dict(buckets), float(cpu.group(1)) if cpu else 0.0


def quantile(q: float, cumulative: list[tuple[float, float]]) -> float | None:
    total = cumulative[-1][1] if cumulative else 0
    if total <= 0:
        return None
    rank, prev_le, prev_count = q * total, 0.0, 0.0
    for le, count in cumulative:
        if count >= rank:
            if le == float("inf"):
                return prev_le
            width = count - prev_count
            return prev_le + (le - prev_le) * ((rank - prev_count) / width if width else 0)
        prev_le, prev_count = le, count
    return prev_le


def summarize(first: dict, last: dict) -> dict:
    groups: dict = defaultdict(lambda: defaultdict(float))
    for (verb, resource, le), value in last.items():
        delta = value - first.get((verb, resource, le), 0.0)
        groups[(verb, resource)][le] += delta
        groups[("all", "non-watch")][le] += delta
    out = {}
    for (verb, resource), by_le in groups.items():
        cumulative = sorted(by_le.items())
        count = cumulative[-1][1] if cumulative else 0
        if count < 50:
            continue
        out[f"{verb} {resource}"] = {
            "requests": int(count),
            "p50_s": round(quantile(0.5, cumulative) or 0, 3),
            "p99_s": round(quantile(0.99, cumulative) or 0, 3),
        }
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["requests"]))


def main() -> int:
    cluster, port, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
    seconds = float(sys.argv[4]) if len(sys.argv) > 4 else 3600
    token = next(
        row.split(",")[0] for row in (cluster / "pki" / "tokens.csv").read_text().splitlines()
        if "admin" in row or "system:masters" in row
    )
    context = ssl.create_default_context(cafile=str(cluster / "pki" / "ca.crt"))
    url = f"https://127.0.0.1:{port}/metrics"
    first, cpu0 = scrape(url, token, context)
    t0 = time.monotonic()
    windows = []
    last, cpu1 = first, cpu0
    while time.monotonic() - t0 < seconds:
        time.sleep(15)
        try:
            now, cpu = scrape(url, token, context)
        except Exception:  # the control plane stopped: the run is over
            break
        windows.append({"t_s": round(time.monotonic() - t0), "by_request": summarize(last, now),
                        "apiserver_cpu_s": round(cpu - cpu1, 1)})
        last, cpu1 = now, cpu
        result = {"seconds": round(time.monotonic() - t0), "apiserver_cpu_s": round(cpu1 - cpu0, 1),
                  "whole_run": summarize(first, last), "windows_15s": windows}
        out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
