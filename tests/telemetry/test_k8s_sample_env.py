"""Kubernetes GPU pods get the executor's GPU sampling period (GANTRY_GPU_SAMPLE_SECONDS)
when the installation sets one, like the local backend's executors; CPU pods do not."""

import kubernetes_validate
import pytest
from django.test import override_settings

from jobs.compute.kubernetes import manifests as m
from jobs.compute.kubernetes.backend import manifest_config

CFG = m.ManifestConfig(api_url="http://gantry-web.gantry.svc:8000", default_image="img:1")


def spec(**kw):
    base = {"id": 7, "attempt": 1, "kind": "train", "tenant_slug": "lab-a", "name": "r"}
    return m.JobSpec(**{**base, **kw})


def env_of(manifest: dict) -> dict:
    pod = manifest["spec"]["template"]["spec"] if manifest["kind"] == "Job" else manifest["spec"]
    return {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}


def workload(s, cfg):
    made = m.job_manifests(s, cfg, {r: "t" for r in range(s.workers)})
    return next(x for x in made if x["kind"] in ("Job", "Pod"))


@pytest.mark.parametrize(
    "s",
    [
        spec(gpus=2),
        spec(kind="notebook", gpus=1),
        spec(kind="distributed", workers=2, gpus=4),
    ],
    ids=["train", "notebook", "distributed"],
)
def test_gpu_pods_get_the_sample_period(s):
    cfg = m.ManifestConfig(**{**CFG.__dict__, "gpu_sample_seconds": 2.5})
    manifest = workload(s, cfg)
    assert env_of(manifest)["GANTRY_GPU_SAMPLE_SECONDS"] == "2.5"
    kubernetes_validate.validate(manifest, kubernetes_validate.utils.latest_version(), strict=True)


def test_cpu_pods_and_unset_period_get_none():
    cfg = m.ManifestConfig(**{**CFG.__dict__, "gpu_sample_seconds": 2.0})
    assert "GANTRY_GPU_SAMPLE_SECONDS" not in env_of(workload(spec(), cfg))
    assert "GANTRY_GPU_SAMPLE_SECONDS" not in env_of(workload(spec(gpus=1), CFG))


def test_the_setting_reaches_the_manifest_config():
    ref = type("Ref", (), {"namespace_prefix": "gantry-"})()
    with override_settings(GANTRY_GPU_SAMPLE_SECONDS=10.0):
        cfg = manifest_config(ref)
    assert env_of(workload(spec(gpus=1), cfg))["GANTRY_GPU_SAMPLE_SECONDS"] == "10"
