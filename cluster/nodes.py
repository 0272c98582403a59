"""GPU utilization of the machines behind Gantry (scheduling.machines lists the machines,
their capacity and who holds them).

Utilization needs a metrics source: NVML on this machine (nvidia-ml-py, when a driver is
there), and on Kubernetes an optional Prometheus that scrapes NVIDIA's DCGM exporter
(`GANTRY_PROMETHEUS_URL`). Without one the page says "no metrics source".
"""

from __future__ import annotations

import logging

from django.conf import settings

from core.nvml import nvml_query

logger = logging.getLogger(__name__)

# GPU utilization (%) per node, as DCGM exporter labels it (the node's host name).
DCGM_QUERY = "avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)"


def prometheus_gpu_utilization(url: str | None = None, timeout: float = 5.0) -> dict[str, float]:
    """{node name: mean GPU utilization in %} from Prometheus; {} when none is configured.
    Raises httpx.HTTPError / ValueError when it does not answer sensibly."""
    import httpx

    url = url if url is not None else settings.GANTRY_PROMETHEUS_URL
    if not url:
        return {}
    response = httpx.get(f"{url}/api/v1/query", params={"query": DCGM_QUERY}, timeout=timeout)
    response.raise_for_status()
    body = response.json()
    if body.get("status") != "success":
        raise ValueError(f"Prometheus answered {body.get('status')}: {body.get('error')}")
    out = {}
    for series in body["data"]["result"]:
        host = series["metric"].get("Hostname")
        if host:
            out[host] = round(float(series["value"][1]), 1)
    return out


def nvml_gpu_utilization() -> float | None:
    """Mean utilization (%) of this machine's GPUs, or None without NVML or GPUs."""

    def rates(nvml) -> list[int]:
        return [
            nvml.nvmlDeviceGetUtilizationRates(nvml.nvmlDeviceGetHandleByIndex(i)).gpu
            for i in range(nvml.nvmlDeviceGetCount())
        ]

    found = nvml_query(rates)
    return round(sum(found) / len(found), 1) if found else None
