"""A real Kubernetes control plane for the live tests: etcd, kube-apiserver,
kube-controller-manager and kube-scheduler built from their Go modules
(platform/dev/k8s-build), and kwok playing the kubelets of fake GPU nodes
(platform/dev/kwok-stages.yaml says what it does to pods).

`KubeCluster().start()` starts them in that order, each in a temporary directory and on
free loopback ports, waits for each to answer, creates the GPU nodes and waits until they
are Ready and untainted; `stop()` ends every process and removes the directory. One
cluster per pytest process (per xdist worker): nothing is shared between runs.

Everything listens on 127.0.0.1 only, and tests connect to nothing else: pod and node
addresses (127.244.0.0/16 and 127.0.0.2, from loopback too) and Service IPs are data,
never targets.

Run by hand: `platform/dev/k8s-up` (prints a KUBECONFIG; Ctrl-C stops it).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import yaml

from core.ports import free_port

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "platform" / "dev" / "k8s-build"
STAGES = REPO / "platform" / "dev" / "kwok-stages.yaml"
START_TIMEOUT = 120
SERVICE_SUBNET = "10.96.0.0/16"  # ClusterIPs: data on kwok; inside the real node's namespace

# The fake GPU nodes: (name, GPUs, GPU model label).
GPU_NODES = (
    ("gpu-a100-0", 8, "NVIDIA-A100-SXM4-80GB"),
    ("gpu-a100-1", 8, "NVIDIA-A100-SXM4-80GB"),
    ("gpu-h100-0", 8, "NVIDIA-H100-80GB-HBM3"),
)


class ClusterUnavailable(Exception):
    """The control plane cannot run here (no binaries) or did not come up."""


def binaries() -> Path:
    """The directory of the built binaries (platform/dev/k8s-build --path)."""
    env = {**os.environ}
    found = subprocess.run(
        [str(BUILD), "--path"], capture_output=True, text=True, env=env, check=False
    )
    path = Path(found.stdout.strip().splitlines()[-1]) if found.stdout.strip() else None
    if found.returncode != 0 or path is None or not path.is_dir():
        raise ClusterUnavailable(
            f"the Kubernetes binaries are not built ({found.stderr.strip() or 'no path'}): "
            "run platform/dev/k8s-build once (about 10 min on 2 cores)"
        )
    return path


def _end_with_parent() -> None:
    """In the child before exec: SIGKILL when the process that started it dies (a killed
    test run leaves no control plane behind). Linux's prctl(PR_SET_PDEATHSIG)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def gpu_node(name: str, gpus: int, model: str) -> dict:
    amounts = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": model,
                "nvidia.com/gpu.count": str(gpus),
            },
        },
        "status": {"capacity": dict(amounts), "allocatable": dict(amounts)},
    }


class KubeCluster:
    def __init__(self, bin_dir: Path | None = None, nodes=GPU_NODES):
        self.bin = bin_dir or binaries()
        self.nodes = nodes
        self.dir = Path(tempfile.mkdtemp(prefix="gantry-k8s-"))
        self.processes: dict[str, subprocess.Popen] = {}
        self.ports = {
            name: free_port()
            for name in (
                "etcd",
                "etcd-peer",
                "apiserver",
                "controller-manager",
                "scheduler",
                "kwok",
            )
        }
        self.token = secrets.token_hex(32)
        self.kubeconfig = self.dir / "kubeconfig"
        self.started_seconds: float | None = None
        self.extra_apiserver_args: list[str] = []  # e.g. an audit log (bench/k8s_scale.py)
        # e.g. kwokctl's --disable-qps-limits for the scale benchmark (flags are appended)
        self.extra_controller_manager_args: list[str] = []
        self.extra_scheduler_args: list[str] = []

    # -- paths and addresses ---------------------------------------------------------
    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def ca(self) -> Path:
        return self.dir / "pki" / "ca.crt"

    def kubeconfig_dict(self, token: str | None = None, user: str = "admin") -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gantry-test",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": __import__("base64")
                        .b64encode(self.ca.read_bytes())
                        .decode(),
                    },
                }
            ],
            "users": [{"name": user, "user": {"token": token or self.token}}],
            "contexts": [{"name": user, "context": {"cluster": "gantry-test", "user": user}}],
            "current-context": user,
        }

    # -- starting ----------------------------------------------------------------------
    def _pki(self) -> None:
        pki = self.dir / "pki"
        pki.mkdir()

        def openssl(*args):
            subprocess.run(["openssl", *args], cwd=pki, check=True, capture_output=True)

        openssl(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.crt", "-days", "30", "-subj", "/CN=gantry-test-ca",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
            "-addext", "subjectKeyIdentifier=hash",
        )  # fmt: skip
        (pki / "api.ext").write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\nsubjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid,issuer\n"
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
        )
        openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "apiserver.key",
            "-out", "apiserver.csr", "-subj", "/CN=kube-apiserver",
        )  # fmt: skip
        openssl(
            "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "30", "-extfile", "api.ext", "-out", "apiserver.crt",
        )  # fmt: skip
        # The API server's client certificate for kubelets (logs, exec on the real node of
        # tests/k8s_node.py, whose kubelet trusts this CA); kwok's nodes never ask for one.
        (pki / "kubelet-client.ext").write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n"
        )
        openssl(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "kubelet-client.key",
            "-out", "kubelet-client.csr", "-subj", "/O=system:masters/CN=kube-apiserver-kubelet",
        )  # fmt: skip
        openssl(
            "x509", "-req", "-in", "kubelet-client.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "30", "-extfile", "kubelet-client.ext",
            "-out", "kubelet-client.crt",
        )  # fmt: skip
        openssl("genrsa", "-out", "sa.key", "2048")
        openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        (pki / "tokens.csv").write_text(f'{self.token},admin,admin-uid,"system:masters"\n')
        self.kubeconfig.write_text(yaml.safe_dump(self.kubeconfig_dict()))

    def _spawn(self, name: str, *argv: str) -> None:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 (kept open for the process)
        self.processes[name] = subprocess.Popen(
            [str(self.bin / argv[0]), *argv[1:]],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.dir,
            start_new_session=True,
            # PDEATHSIG follows the starting thread, not the process: only from the
            # main thread (the restart test starts the API server from another one).
            preexec_fn=_end_with_parent
            if threading.current_thread() is threading.main_thread()
            else None,
        )

    def _wait(self, name: str, check, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            process = self.processes.get(name)
            if process is not None and process.poll() is not None:
                raise ClusterUnavailable(
                    f"{name} exited with code {process.returncode}:\n{self.log_tail(name)}"
                )
            try:
                if check():
                    return
            except Exception as exc:  # not up yet
                last = exc
            time.sleep(0.2)
        raise ClusterUnavailable(
            f"{name} did not come up in {timeout} s ({last}):\n{self.log_tail(name)}"
        )

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.dir / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _get(self, url: str, *, tls: bool = True, token: bool = True) -> str:
        context = None
        if url.startswith("https"):
            context = ssl.create_default_context(cafile=str(self.ca)) if tls else None
            if not tls:
                context = ssl._create_unverified_context()  # the components' self-signed certs
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(request, timeout=5, context=context) as response:
            return response.read().decode()

    def start_etcd(self) -> None:
        client = f"http://127.0.0.1:{self.ports['etcd']}"
        peer = f"http://127.0.0.1:{self.ports['etcd-peer']}"
        self._spawn(
            "etcd",
            "etcd",
            "--name=node0",
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=node0={peer}",
            "--unsafe-no-fsync=true",
            "--auto-compaction-retention=1",
            "--log-level=warn",
        )
        self._wait("etcd", lambda: '"health":"true"' in self._get(client + "/health", token=False))

    def start_apiserver(self) -> None:
        pki = self.dir / "pki"
        self._spawn(
            "apiserver",
            "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'kubelet-client.key'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            # Service IPs are data here (nothing routes them); the `kubernetes` Service's
            # endpoint would be 127.0.0.1, which Endpoints refuse: not reconciled.
            f"--service-cluster-ip-range={SERVICE_SUBNET}",
            "--endpoint-reconciler-type=none",
            # Default admission plugins (NamespaceLifecycle, LimitRanger, ServiceAccount,
            # ResourceQuota, PodSecurity, ...) stay on: nothing is disabled.
            "--profiling=false",
            *self.extra_apiserver_args,
        )
        self._wait("apiserver", lambda: self._get(self.server + "/readyz") == "ok")

    def start_controllers(self) -> None:
        pki = self.dir / "pki"
        self._spawn(
            "controller-manager",
            "kube-controller-manager",
            f"--kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['controller-manager']}",
            "--leader-elect=false",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            "--use-service-account-credentials=true",
            "--controllers=*",
            # Quota usage is recomputed quickly, so a freed quota admits the next pod soon.
            "--resource-quota-sync-period=5s",
            *self.extra_controller_manager_args,
        )
        self._spawn(
            "scheduler",
            "kube-scheduler",
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['scheduler']}",
            "--leader-elect=false",
            *self.extra_scheduler_args,
        )
        for name in ("controller-manager", "scheduler"):
            url = f"https://127.0.0.1:{self.ports[name]}/healthz"
            self._wait(name, lambda url=url: self._get(url, tls=False, token=False) == "ok")

    def start_kwok(self) -> None:
        self._spawn(
            "kwok",
            "kwok",
            f"--kubeconfig={self.kubeconfig}",
            f"--config={STAGES}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.2",
            "--cidr=127.244.0.0/16",
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{self.ports['kwok']}",
        )
        url = f"http://127.0.0.1:{self.ports['kwok']}/healthz"
        self._wait("kwok", lambda: self._get(url, token=False).strip() == "ok")

    def client(self, token: str | None = None):
        """An ApiClient for the admin (or the given bearer token)."""
        from kubernetes import client, config

        cfg = client.Configuration()
        config.load_kube_config_from_dict(
            self.kubeconfig_dict(token), client_configuration=cfg, persist_config=False
        )
        return client.ApiClient(cfg)

    def add_nodes(self) -> None:
        """Create the GPU nodes that are not there; wait until all are Ready, untainted."""
        from kubernetes import client

        core = client.CoreV1Api(self.client())
        present = {n.metadata.name for n in core.list_node().items}
        for name, gpus, model in self.nodes:
            if name not in present:
                core.create_node(gpu_node(name, gpus, model))

        def ready() -> bool:
            nodes = core.list_node().items
            return len(nodes) == len(self.nodes) and all(
                any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
                and not any(t.key.startswith("node.kubernetes.io/") for t in n.spec.taints or [])
                for n in nodes
            )

        self._wait("kwok", ready)

        # The namespace `default`'s ServiceAccount appears with the controller-manager.
        def default_account() -> bool:
            return bool(core.read_namespaced_service_account("default", "default"))

        self._wait("controller-manager", default_account)

    def start(self) -> KubeCluster:
        begun = time.monotonic()
        try:
            self._pki()
            self.start_etcd()
            self.start_apiserver()
            self.start_controllers()
            self.start_kwok()
            self.add_nodes()
        except BaseException:
            self.stop(keep_logs=True)
            raise
        self.started_seconds = time.monotonic() - begun
        return self

    # -- restarting and stopping --------------------------------------------------------
    def _end(self, name: str, timeout: float = 15) -> None:
        process = self.processes.pop(name, None)
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def restart_apiserver(self) -> None:
        """Stop the API server (every watch on it ends) and start it again."""
        self._end("apiserver")
        self.start_apiserver()

    def stop(self, keep_logs: bool = False) -> None:
        for name in ("kwok", "scheduler", "controller-manager", "apiserver", "etcd"):
            self._end(name)
        if keep_logs:
            print(f"k8s_cluster: logs kept in {self.dir}", file=sys.stderr)
            return
        shutil.rmtree(self.dir, ignore_errors=True)


def main() -> None:
    cluster = KubeCluster().start()
    print(f"control plane up in {cluster.started_seconds:.1f} s", file=sys.stderr)
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    sys.stdout.flush()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
