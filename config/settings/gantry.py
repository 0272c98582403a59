"""Gantry's own: jobs and their backends, runtime images, datasets."""

from pathlib import Path

from config.settings.base import BASE_DIR, DATA_DIR, GANTRY_ENV, GANTRY_URL, REDIS_URL
from config.settings.env import fail, setting

# --- Gantry --------------------------------------------------------------
GANTRY_DEMO_PASSWORD = setting("str", "GANTRY_DEMO_PASSWORD", "gantry-demo")

# --- Jobs ----------------------------------------------------------------
GANTRY_JOB_BACKEND = setting("str", "GANTRY_JOB_BACKEND", "local")
GANTRY_JOBS_DIR = Path(setting("str", "GANTRY_JOBS_DIR", str(DATA_DIR / "jobs"))).resolve()
# Local backend capacity; 0 = what the machine has (CI overrides it on small runners).
GANTRY_LOCAL_CPUS = setting("int", "GANTRY_LOCAL_CPUS", 0)
GANTRY_LOCAL_MEMORY_MB = setting("int", "GANTRY_LOCAL_MEMORY_MB", 0)
# Test-only, deliberately not read from the environment: the local backend reports this
# many GPUs (indices 0…n-1) instead of the detected ones, for admission's bookkeeping on
# machines without GPUs. Nothing checks that a device exists; jobs see the indices in
# CUDA_VISIBLE_DEVICES. Tests set it with the `settings` fixture.
GANTRY_LOCAL_FAKE_GPUS = 0
# Local jobs run in a bubblewrap sandbox (jobs/compute/sandbox.py): "auto" uses it when
# this machine can, "required" refuses to start without it (system check error), "off"
# never uses it (then jobs of a second tenant are refused, unless the switch below).
GANTRY_SANDBOX = setting("str", "GANTRY_SANDBOX", "auto")
if GANTRY_SANDBOX not in ("auto", "required", "off"):
    fail("GANTRY_SANDBOX", f"must be auto, required or off, not {GANTRY_SANDBOX!r}")
GANTRY_ALLOW_UNISOLATED_JOBS = setting("bool", "GANTRY_ALLOW_UNISOLATED_JOBS", False)
# Sandboxed jobs run as uid/gid BASE + (job id mod COUNT): not Gantry's, not a login user's.
GANTRY_SANDBOX_UID_BASE = setting("int", "GANTRY_SANDBOX_UID_BASE", 200_000)
GANTRY_SANDBOX_UID_COUNT = setting("int", "GANTRY_SANDBOX_UID_COUNT", 65_536)
if GANTRY_SANDBOX_UID_BASE < 1000 or GANTRY_SANDBOX_UID_COUNT < 1:
    fail("GANTRY_SANDBOX_UID_BASE", "must be 1000 or more, with a COUNT of 1 or more")
# Host directories every sandboxed job may read (shared code, a lab's datasets on NFS…),
# besides its runtime. Never Gantry's checkout or data directory (a system check says so).
GANTRY_JOB_READ_ONLY_PATHS = setting(
    "list", "GANTRY_JOB_READ_ONLY_PATHS", [str(BASE_DIR / "examples")]
)
# Sandboxed local jobs are held in a cgroup to the memory and CPUs each asks for, and to
# this many processes and threads per worker (a fork past it fails with EAGAIN).
GANTRY_JOB_MAX_PROCESSES = setting("int", "GANTRY_JOB_MAX_PROCESSES", 4096)
# Disk a sandboxed local job's worker may fill in its working directory (MiB): past it the
# job is stopped, with that reason.
GANTRY_JOB_DISK_MB = setting("int", "GANTRY_JOB_DISK_MB", 20 * 1024)
if GANTRY_JOB_MAX_PROCESSES < 64:
    fail("GANTRY_JOB_MAX_PROCESSES", "must be 64 or more (a Python job alone runs a few)")
if GANTRY_JOB_DISK_MB < 16:
    fail("GANTRY_JOB_DISK_MB", "must be 16 or more")
GANTRY_HEARTBEAT_SECONDS = setting("float", "GANTRY_HEARTBEAT_SECONDS", 5.0)
# Kicked admission passes (after submits, cancels, finished jobs) start at most this often.
GANTRY_ADMISSION_KICK_SECONDS = setting("float", "GANTRY_ADMISSION_KICK_SECONDS", 1.0)
# How often an open live-log socket re-checks that its user may still see the job.
GANTRY_WS_RECHECK_SECONDS = setting("float", "GANTRY_WS_RECHECK_SECONDS", 10.0)
# Each user's roles and visible projects, read on nearly every request, are kept in the
# shared cache between requests (projects.permissions.access_of). Only with Redis: a
# per-process cache would not hear of changes made in other processes.
GANTRY_ACCESS_CACHE = setting("bool", "GANTRY_ACCESS_CACHE", bool(REDIS_URL))
if GANTRY_ACCESS_CACHE and not REDIS_URL:
    fail("GANTRY_ACCESS_CACHE", "needs REDIS_URL (a cache every process shares)")
GANTRY_HEARTBEAT_TIMEOUT_SECONDS = setting("int", "GANTRY_HEARTBEAT_TIMEOUT_SECONDS", 30)
GANTRY_JOB_GRACE_SECONDS = setting("int", "GANTRY_JOB_GRACE_SECONDS", 10)
# Checkpoints (checkpoints/): a preempted job gets this long, after its preempt file
# appears, to save a checkpoint and stop before SIGTERM; retention keeps this many of a
# job's checkpoints in projects without a policy of their own.
GANTRY_PREEMPT_SAVE_SECONDS = setting("int", "GANTRY_PREEMPT_SAVE_SECONDS", 30)
GANTRY_CHECKPOINT_KEEP_LAST = setting("int", "GANTRY_CHECKPOINT_KEEP_LAST", 3)
GANTRY_EXECUTOR_FINAL_FLUSH_SECONDS = setting("int", "GANTRY_EXECUTOR_FINAL_FLUSH_SECONDS", 300)
# A job token keeps working this long after the job ended, so final logs and outputs flush.
GANTRY_JOB_TOKEN_GRACE_MINUTES = setting("int", "GANTRY_JOB_TOKEN_GRACE_MINUTES", 10)
GANTRY_NOTEBOOK_IDLE_MINUTES = setting("int", "GANTRY_NOTEBOOK_IDLE_MINUTES", 120)
# GPU telemetry (telemetry/): a GPU job whose GPUs stay below IDLE_PERCENT utilization for
# IDLE_MINUTES is warned, then stopped after GRACE_MINUTES (projects may set their own
# policy; IDLE_KINDS "notebook" or "all" by default).
GANTRY_GPU_IDLE_PERCENT = setting("int", "GANTRY_GPU_IDLE_PERCENT", 5)
GANTRY_GPU_IDLE_MINUTES = setting("float", "GANTRY_GPU_IDLE_MINUTES", 60.0)
GANTRY_GPU_IDLE_GRACE_MINUTES = setting("float", "GANTRY_GPU_IDLE_GRACE_MINUTES", 15.0)
GANTRY_GPU_IDLE_KINDS = setting("str", "GANTRY_GPU_IDLE_KINDS", "notebook")
# NVIDIA dcgm-exporter endpoints (comma-separated; a name is scraped at every address it
# resolves to, e.g. the headless Service's): Kubernetes jobs' GPU samples come from them
# each minute, and their pods then do not sample NVML themselves.
GANTRY_DCGM_EXPORTER_URLS = setting("list", "GANTRY_DCGM_EXPORTER_URLS", [])
# The executor's GPU sampling period as Kubernetes GPU pods get it (unset: its own 5 s;
# 0, off, with the DCGM exporter). Local executors read the variable itself.
GANTRY_GPU_SAMPLE_SECONDS = (
    0.0 if GANTRY_DCGM_EXPORTER_URLS else setting("float", "GANTRY_GPU_SAMPLE_SECONDS", None)
)
if GANTRY_GPU_IDLE_KINDS not in ("notebook", "all"):
    fail("GANTRY_GPU_IDLE_KINDS", f"must be notebook or all, not {GANTRY_GPU_IDLE_KINDS!r}")
# Notifications (notifications/): webhook and email deliveries are retried this many
# times, waiting RETRY_SECONDS, then twice that, ... between attempts, then marked failing.
GANTRY_NOTIFY_MAX_ATTEMPTS = setting("int", "GANTRY_NOTIFY_MAX_ATTEMPTS", 6)
GANTRY_NOTIFY_RETRY_SECONDS = setting("int", "GANTRY_NOTIFY_RETRY_SECONDS", 30)
GANTRY_NOTIFY_TIMEOUT_SECONDS = setting("int", "GANTRY_NOTIFY_TIMEOUT_SECONDS", 10)
# A queued job's people hear of it after this long (a project may set its own), and a
# tenant's when its running jobs hold this share of its GPU quota.
GANTRY_NOTIFY_WAITING_MINUTES = setting("int", "GANTRY_NOTIFY_WAITING_MINUTES", 60)
GANTRY_NOTIFY_QUOTA_PERCENT = setting("int", "GANTRY_NOTIFY_QUOTA_PERCENT", 90)
# Delivered and failing deliveries are kept this long on a subscription's page.
GANTRY_NOTIFY_LOG_DAYS = setting("int", "GANTRY_NOTIFY_LOG_DAYS", 30)
# Webhooks to loopback, private and link-local addresses (the machine's own services, a
# cloud's metadata endpoint) are refused unless allowed; development allows them.
GANTRY_NOTIFY_ALLOW_PRIVATE_HOSTS = setting(
    "bool", "GANTRY_NOTIFY_ALLOW_PRIVATE_HOSTS", GANTRY_ENV != "production"
)
if GANTRY_NOTIFY_MAX_ATTEMPTS < 1 or GANTRY_NOTIFY_TIMEOUT_SECONDS < 1:
    fail("GANTRY_NOTIFY_MAX_ATTEMPTS", "attempts and the timeout must be at least 1")
# Notebooks are served from an origin of their own, one host per job, so that Gantry's
# cookies never reach what a notebook shows (interactive/origin.py). `{job}` stands for
# the job's id. The default: browsers resolve *.localhost to this machine by themselves,
# and Gantry's cookies of 127.0.0.1 are never sent to <id>.nb.localhost.
GANTRY_NOTEBOOK_PORT = setting("int", "GANTRY_NOTEBOOK_PORT", 8001)
if not 0 < GANTRY_NOTEBOOK_PORT < 65536:
    fail("GANTRY_NOTEBOOK_PORT", f"a TCP port, 1 to 65535, not {GANTRY_NOTEBOOK_PORT}")
GANTRY_NOTEBOOK_ORIGIN = setting(
    "str", "GANTRY_NOTEBOOK_ORIGIN", f"http://{{job}}.nb.localhost:{GANTRY_NOTEBOOK_PORT}"
).rstrip("/")
_nb_origin = GANTRY_NOTEBOOK_ORIGIN.split("://", 1)
if (
    len(_nb_origin) != 2
    or _nb_origin[0] not in ("http", "https")
    or "/" in _nb_origin[1]
    or _nb_origin[1].count("{job}") != 1
    or not _nb_origin[1].startswith("{job}.")
    or "{" in _nb_origin[1].replace("{job}", "", 1)
):
    fail(
        "GANTRY_NOTEBOOK_ORIGIN",
        "an origin whose host starts with a {job} label, such as https://{job}.nb.lab.example "
        f"(no path), not {GANTRY_NOTEBOOK_ORIGIN!r}",
    )
# A notebook request that gets no answer in this many seconds answers 504 (kernels and
# terminals talk over websockets, which have no such limit).
GANTRY_NOTEBOOK_TIMEOUT_SECONDS = setting("float", "GANTRY_NOTEBOOK_TIMEOUT_SECONDS", 10.0)
# TensorBoard for a job's logdir (interactive/tensorboard.py): stopped after this many idle
# minutes; run by this Python (empty: Gantry's own, which the notebooks extra gives it).
GANTRY_TENSORBOARD_IDLE_MINUTES = setting("float", "GANTRY_TENSORBOARD_IDLE_MINUTES", 30.0)
GANTRY_TENSORBOARD_PYTHON = setting("str", "GANTRY_TENSORBOARD_PYTHON", "")
if GANTRY_NOTEBOOK_TIMEOUT_SECONDS <= 0:
    fail("GANTRY_NOTEBOOK_TIMEOUT_SECONDS", "a number of seconds above 0")
GANTRY_JOB_WORKDIR_RETENTION_HOURS = setting("int", "GANTRY_JOB_WORKDIR_RETENTION_HOURS", 72)
for _name in ("GANTRY_LOCAL_CPUS", "GANTRY_LOCAL_MEMORY_MB", "GANTRY_HEARTBEAT_TIMEOUT_SECONDS"):
    if globals()[_name] < 0:
        fail(_name, "must not be negative")

# --- Runtime images: the OCI registry Gantry browses and pushes custom images to ----
GANTRY_REGISTRY_URL = setting("str", "GANTRY_REGISTRY_URL", "").rstrip("/")
if GANTRY_REGISTRY_URL and not GANTRY_REGISTRY_URL.startswith(("http://", "https://")):
    fail("GANTRY_REGISTRY_URL", "must start with http:// or https://")
GANTRY_REGISTRY_USERNAME = setting("str", "GANTRY_REGISTRY_USERNAME", "")
GANTRY_REGISTRY_PASSWORD = setting("str", "GANTRY_REGISTRY_PASSWORD", "")
GANTRY_REGISTRY_VERIFY_TLS = setting("bool", "GANTRY_REGISTRY_VERIFY_TLS", True)
GANTRY_REGISTRY_TIMEOUT_SECONDS = setting("float", "GANTRY_REGISTRY_TIMEOUT_SECONDS", 15.0)
# Custom image builds: where pip finds wheels (downloaded here; installed by the image's own
# pip with buildah, else here as pure-Python wheels only).
GANTRY_PIP_INDEX_URL = setting("str", "GANTRY_PIP_INDEX_URL", "")
GANTRY_PIP_FIND_LINKS = setting("str", "GANTRY_PIP_FIND_LINKS", "")
GANTRY_PIP_NO_INDEX = setting("bool", "GANTRY_PIP_NO_INDEX", False)
# Which builder custom image builds use: "buildah" (images/buildah.py: the base image's own
# pip installs wheels with compiled code too, in a container with no network), "registry"
# (images/builder.py: one layer written through the registry's API, pure-Python wheels
# only, no container runtime needed) or "auto" (buildah where buildah and runc are here
# and Gantry runs as root).
GANTRY_IMAGE_BUILDER = setting("str", "GANTRY_IMAGE_BUILDER", "auto")
if GANTRY_IMAGE_BUILDER not in ("auto", "buildah", "registry"):
    fail("GANTRY_IMAGE_BUILDER", "one of auto, buildah, registry")
# buildah's storage (vfs) for builds; platform/dev/images-build keeps its images here too.
GANTRY_BUILDAH_STORAGE = setting("str", "GANTRY_BUILDAH_STORAGE", "/var/lib/gantry-images")
# The memory limit of a build's container (the base image's pip runs in it).
GANTRY_IMAGE_BUILD_MEMORY_MB = setting("int", "GANTRY_IMAGE_BUILD_MEMORY_MB", 4096)

# --- Kubernetes backend (GANTRY_JOB_BACKEND=kubernetes) --------------------------------
# Clusters are registered in the admin (cluster.KubernetesCluster); with none registered,
# the backend uses $KUBECONFIG, or the in-cluster service account when it runs in a pod.

# API creates of admitted jobs run in this many threads at once (one client each).
GANTRY_K8S_LAUNCH_CONCURRENCY = setting("int", "GANTRY_K8S_LAUNCH_CONCURRENCY", 16)
GANTRY_K8S_DEFAULT_IMAGE = setting("str", "GANTRY_K8S_DEFAULT_IMAGE", "gantry/pytorch:latest")
# The image of endpoints' pods on Kubernetes (MLServer with its scikit-learn runtime and
# `python`: platform/images/serving, built by platform/dev/images-build, which also has
# the MLflow runtime MLflow pyfunc endpoints need; the default, Seldon's, has not).
GANTRY_K8S_ENDPOINT_IMAGE = setting(
    "str", "GANTRY_K8S_ENDPOINT_IMAGE", "docker.io/seldonio/mlserver:1.7.1-sklearn"
)
# The image of the pods of endpoints whose model needs PyTorch (TorchScript, MLflow's
# pytorch flavor): the above with PyTorch added (platform/images/serving built with
# --build-arg TORCH=1). Empty: such endpoints on Kubernetes are refused, saying so
# (neither default image has torch).
GANTRY_K8S_TORCH_IMAGE = setting("str", "GANTRY_K8S_TORCH_IMAGE", "")
# The address executors inside the cluster use to reach Gantry (often a Service name).
GANTRY_K8S_API_URL = setting("str", "GANTRY_K8S_API_URL", GANTRY_URL).rstrip("/")
# The namespace Gantry itself runs in: only it may reach notebook pods (NetworkPolicy).
GANTRY_K8S_PLATFORM_NAMESPACE = setting("str", "GANTRY_K8S_PLATFORM_NAMESPACE", "gantry")
# GPU model -> node selector, e.g. {"A100": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}};
# a model not listed selects nodes whose nvidia.com/gpu.product label equals it.
GANTRY_K8S_GPU_NODE_SELECTORS = setting("json", "GANTRY_K8S_GPU_NODE_SELECTORS", {})
# Tolerations given to GPU pods (GPU nodes are usually tainted).
GANTRY_K8S_GPU_TOLERATIONS = setting(
    "json",
    "GANTRY_K8S_GPU_TOLERATIONS",
    [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
)
GANTRY_K8S_IMAGE_PULL_SECRETS = setting("list", "GANTRY_K8S_IMAGE_PULL_SECRETS", [])
GANTRY_K8S_TTL_SECONDS_AFTER_FINISHED = setting("int", "GANTRY_K8S_TTL_SECONDS_AFTER_FINISHED", 3600)
GANTRY_K8S_MASTER_PORT = setting("int", "GANTRY_K8S_MASTER_PORT", 29500)
GANTRY_K8S_NOTEBOOK_PORT = setting("int", "GANTRY_K8S_NOTEBOOK_PORT", 8888)
# Job pods use the node's network (hostNetwork): for tests and single-node labs only, where
# Gantry listens on the node's loopback; on a cluster pods have their own network.
GANTRY_K8S_HOST_NETWORK = setting("bool", "GANTRY_K8S_HOST_NETWORK", False)
# The Pod Security Standard tenant namespaces enforce (restricted, baseline or privileged);
# Gantry's own pods pass "restricted". With GANTRY_K8S_HOST_NETWORK: privileged.
GANTRY_K8S_POD_SECURITY = setting("str", "GANTRY_K8S_POD_SECURITY", "restricted")
if GANTRY_K8S_POD_SECURITY not in ("restricted", "baseline", "privileged"):
    fail("GANTRY_K8S_POD_SECURITY", "one of restricted, baseline, privileged")
# A pod no node can take for this long fails its attempt ("no node can run it: …").
GANTRY_K8S_UNSCHEDULABLE_SECONDS = setting("int", "GANTRY_K8S_UNSCHEDULABLE_SECONDS", 600)
GANTRY_K8S_API_TIMEOUT_SECONDS = setting("float", "GANTRY_K8S_API_TIMEOUT_SECONDS", 10.0)
# Optional GPU utilization source on Kubernetes: a Prometheus scraping NVIDIA's DCGM exporter.
GANTRY_PROMETHEUS_URL = setting("str", "GANTRY_PROMETHEUS_URL", "").rstrip("/")
if not isinstance(GANTRY_K8S_GPU_NODE_SELECTORS, dict) or not all(
    isinstance(v, dict) for v in GANTRY_K8S_GPU_NODE_SELECTORS.values()
):
    fail("GANTRY_K8S_GPU_NODE_SELECTORS", "must be a JSON object of model -> {label: value}")
if not 1 <= GANTRY_K8S_LAUNCH_CONCURRENCY <= 256:
    fail("GANTRY_K8S_LAUNCH_CONCURRENCY", "threads creating Kubernetes objects, 1 to 256")
if not isinstance(GANTRY_K8S_GPU_TOLERATIONS, list):
    fail("GANTRY_K8S_GPU_TOLERATIONS", "must be a JSON list of Kubernetes tolerations")

# --- Datasets ------------------------------------------------------------
# Per-tenant storage for datasets when the tenant has no datasets.StorageQuota row.
GANTRY_TENANT_STORAGE_QUOTA_GB = setting("float", "GANTRY_TENANT_STORAGE_QUOTA_GB", 100.0)
GANTRY_UPLOAD_PART_MB = setting("int", "GANTRY_UPLOAD_PART_MB", 16)
# An upload with no activity for this long is aborted and its parts deleted.
GANTRY_UPLOAD_EXPIRY_HOURS = setting("int", "GANTRY_UPLOAD_EXPIRY_HOURS", 24)
GANTRY_ARCHIVE_MAX_BYTES = setting("int", "GANTRY_ARCHIVE_MAX_BYTES", 50 * 1024**3)
GANTRY_ARCHIVE_MAX_FILES = setting("int", "GANTRY_ARCHIVE_MAX_FILES", 200_000)
GANTRY_ARCHIVE_MAX_RATIO = setting("int", "GANTRY_ARCHIVE_MAX_RATIO", 200)
# Bucket prefixes (comma-separated) whose objects may be imported as a dataset version;
# empty turns the feature off.
GANTRY_DATASET_IMPORT_PREFIXES = setting("str", "GANTRY_DATASET_IMPORT_PREFIXES", "")
# Code snapshots (snapshots/): the most files and megabytes one snapshot may hold.
GANTRY_SNAPSHOT_MAX_FILES = setting("int", "GANTRY_SNAPSHOT_MAX_FILES", 20_000)
GANTRY_SNAPSHOT_MAX_MB = setting("int", "GANTRY_SNAPSHOT_MAX_MB", 200)
# A snapshot never finalized is deleted this many hours after it was created (with the
# contents only it held).
GANTRY_SNAPSHOT_PENDING_HOURS = setting("int", "GANTRY_SNAPSHOT_PENDING_HOURS", 24)
if GANTRY_UPLOAD_PART_MB < 5:
    fail("GANTRY_UPLOAD_PART_MB", "must be at least 5 (the S3 minimum part size)")
