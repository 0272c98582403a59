"""One real Kubernetes worker node beside kwok's fake ones: containerd 2.x and kubelet
(both built by platform/dev/k8s-build), runc and the CNI plugins from Debian. Its pods are
real processes in real containers, under the real runtime's security settings.

`KubeNode(cluster).start()` starts containerd and kubelet in a directory of their own
(root, state, sockets, kubelet's root and pod logs), under a cgroup of their own in every
cgroup v1 hierarchy (`/gantry-node-<id>`: kubelet's cgroupRoot, so two nodes on one machine
never share `kubepods`), and waits until the node is Ready. `stop()` kills every process in
that cgroup (containerd, its shims, the containers, kubelet), unmounts whatever they left
under the directory, removes the shims' sockets (in the machine-wide /run/containerd/s),
the cgroups and the directory: nothing is left behind.

These machines mount cgroup v1, so kubelet runs with `failCgroupV1: false` and the cgroupfs
driver (containerd's runc with SystemdCgroup off); production nodes use cgroup v2 and the
systemd driver.

The network rule: tests send traffic only to loopback, or to addresses inside network
namespaces the test run created. The node keeps it so:
- containerd, kubelet, kube-proxy and the cluster DNS (CoreDNS) run inside a network
  namespace the node makes for itself (tests/netns.py: `ip netns add`, no link to the
  machine's network), so the pod network is there too: the bridge `cni0` (POD_SUBNET, the
  gateway GATEWAY), every pod's interface (the CNI `bridge` plugin, run by containerd) and
  kube-proxy's iptables rules, which make Services' ClusterIPs (SERVICE_SUBNET, routed to
  the bridge) work there. Pods reach each other and the namespace's own addresses, nothing
  else;
- the few ways across are relays (tests/netns.py), each from loopback or an address inside
  the namespace to loopback on the other side: the API server (for kubelet and CoreDNS),
  the test registry (for pulls), kubelet's API (for the API server's exec and logs), and
  what a test exposes to the pods with `expose()` (Gantry's live server, at
  `http://GATEWAY:<port>`) or `reach()`es inside from loopback;
- `run_inside()` places a process as Gantry's own servers sit in a cluster (the notebook
  origin): inside the namespace, with a resolv.conf naming the cluster DNS bind-mounted in
  a mount namespace of its own, its database reached through relays;
- its address is 127.0.0.1: kubelet is named `127.0.0.1` (a host name that is an IP is
  taken as the node's address with no look-up; `--node-ip` refuses loopback), so the API
  server's calls to kubelet go to loopback and the relay;
- kubelet's API and health ports and containerd's streaming server listen on the
  namespace's 127.0.0.1; containerd's API is a Unix socket in the node's directory;
- pods ask the cluster DNS at GATEWAY (cluster.local names only: it forwards nothing, so
  no name leaves the namespace); images come from the test registry over plain HTTP
  through the relay, and the pause image from a local file; a pull from any other
  registry goes to 127.0.0.1:9, where nothing listens (`certs.d/_default`).
A pod on the host's network (hostNetwork) shares the node's namespace, not the machine's.

kubelet signs in with the cluster's admin token (the test API server has no node
authorizer) and trusts the cluster's CA for the API server's calls (exec, logs: the API
server's kubelet client certificate, tests/k8s_cluster.py); anonymous calls are refused and
others are authorized by the API server (webhook).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import yaml

from core.ports import free_port
from tests.k8s_cluster import BUILD, SERVICE_SUBNET, ClusterUnavailable, KubeCluster
from tests.netns import NetworkNamespace, Relay, inside

NODE_NAME = "127.0.0.1"
PAUSE_IMAGE = "localhost/gantry/pause:1"
CGROUPS = Path("/sys/fs/cgroup")
RUNC = "/usr/sbin/runc"
CNI_PLUGINS = Path("/usr/lib/cni")
START_TIMEOUT = 120
# The pod network, inside the node's own network namespace (never routed anywhere else).
POD_SUBNET = "10.244.0.0/24"
GATEWAY = "10.244.0.1"
CLUSTER_DOMAIN = "cluster.local"


def built(flag: str, what: str) -> Path:
    """Where platform/dev/k8s-build put `what` (its `--containerd-path`, `--coredns-path`)."""
    found = subprocess.run([str(BUILD), flag], capture_output=True, text=True, check=False)
    path = Path(found.stdout.strip()) if found.stdout.strip() else None
    if found.returncode != 0 or path is None or not path.is_dir():
        raise ClusterUnavailable(
            f"{what} is not built ({found.stderr.strip() or 'no path'}): "
            "run platform/dev/k8s-build"
        )
    return path


def containerd_binaries() -> Path:
    """containerd, its runc shim, ctr and pause (platform/dev/k8s-build --containerd-path)."""
    path = built("--containerd-path", "containerd")
    plugins = [CNI_PLUGINS / name for name in ("loopback", "bridge", "host-local")]
    missing = [p for p in (RUNC, *plugins) if not Path(p).exists()]
    if missing:
        raise ClusterUnavailable(f"Debian's runc and containernetworking-plugins: no {missing}")
    return path


def hierarchies() -> list[Path]:
    """The cgroup v1 hierarchies kubelet and runc use (cpu, memory, pids, ...)."""
    mounts = Path("/proc/self/mounts").read_text().splitlines()
    return [
        Path(fields[1])
        for fields in (line.split() for line in mounts)
        if fields[2] == "cgroup" and fields[1].startswith(str(CGROUPS))
    ]


def pause_layout(pause: Path, target: Path) -> Path:
    """An OCI image archive of one layer holding `pause`: the pods' sandbox image, made
    here because no image hub is reachable. Returns the archive for `ctr images import`."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tar.gettarinfo(str(pause), arcname="pause")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        with pause.open("rb") as f:
            tar.addfile(info, f)
    blobs: dict[str, bytes] = {}

    def blob(data: bytes, media_type: str) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"mediaType": media_type, "digest": digest, "size": len(data)}

    layer_desc = blob(layer.getvalue(), "application/vnd.oci.image.layer.v1.tar")
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
    }
    config_desc = blob(json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json")
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer_desc],
    }
    manifest_desc = blob(
        json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json"
    )
    manifest_desc["annotations"] = {"io.containerd.image.name": PAUSE_IMAGE}
    index = {"schemaVersion": 2, "manifests": [manifest_desc]}
    archive = target / "pause.tar"
    with tarfile.open(archive, "w") as tar:
        for name, data in [
            ("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
            ("index.json", json.dumps(index).encode()),
            *((f"blobs/sha256/{d.split(':')[1]}", data) for d, data in blobs.items()),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


class KubeNode:
    def __init__(self, cluster: KubeCluster, registry_hosts: tuple[str, ...] = ()):
        self.cluster = cluster
        self.bin = containerd_binaries()
        self.registry_hosts = registry_hosts
        self.dir = Path(tempfile.mkdtemp(prefix="gantry-node-"))
        self.cgroup = f"gantry-node-{secrets.token_hex(4)}"
        self.coredns = built("--coredns-path", "CoreDNS") / "coredns"
        self.ports = {name: free_port() for name in ("kubelet", "healthz")}
        self.processes: dict[str, subprocess.Popen] = {}
        self.netns: NetworkNamespace | None = None
        self.relays: list[Relay] = []
        self.exposed: dict[int, Relay] = {}
        self.relayed: set[int] = set()  # the machine's loopback ports relayed in
        self.started_seconds: float | None = None
        self.sockets: set[str] = set()  # the shims' (stop() removes them)

    @property
    def socket(self) -> Path:
        return self.dir / "containerd.sock"

    # -- configuration -------------------------------------------------------------------
    def _containerd_config(self) -> Path:
        d = self.dir
        (d / "cni").mkdir()
        (d / "cni" / "10-pods.conflist").write_text(
            json.dumps(
                {
                    "cniVersion": "1.0.0",
                    "name": "gantry-pods",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": "cni0",
                            "isGateway": True,
                            "ipMasq": False,  # nowhere to masquerade to
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                                "routes": [{"dst": "0.0.0.0/0"}],
                                "dataDir": str(d / "cni-ipam"),
                            },
                        }
                    ],
                }
            )
        )
        # Any other registry (an image hub, a name to look up) is refused on loopback's
        # discard port: a pull never leaves the machine, nor asks a name server.
        default = d / "certs.d" / "_default"
        default.mkdir(parents=True)
        default.joinpath("hosts.toml").write_text(
            'server = "http://127.0.0.1:9"\n\n[host."http://127.0.0.1:9"]\n'
            '  capabilities = ["pull", "resolve"]\n'
        )
        for host in self.registry_hosts:  # plain HTTP, on loopback only
            hosts = d / "certs.d" / host
            hosts.mkdir()
            hosts.joinpath("hosts.toml").write_text(
                f'server = "http://{host}"\n\n[host."http://{host}"]\n'
                '  capabilities = ["pull", "resolve"]\n'
            )
        cri_images = "plugins.'io.containerd.cri.v1.images'"
        cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
        runc = f"{cri_runtime}.containerd.runtimes.runc"
        config = d / "containerd.toml"
        config.write_text(
            f"""version = 3
root = '{d / "containerd" / "root"}'
# NRI's socket is machine-wide (/var/run/nri): two nodes on one machine would share it.
disabled_plugins = ['io.containerd.nri.v1.nri']
state = '{d / "containerd" / "state"}'

[grpc]
  address = '{self.socket}'
[ttrpc]
  address = '{self.socket}.ttrpc'
[debug]
  address = ''
[metrics]
  address = ''

[plugins.'io.containerd.internal.v1.opt']
  path = '{d / "containerd" / "opt"}'
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
[{cri_images}]
  snapshotter = 'overlayfs'
  [{cri_images}.pinned_images]
    sandbox = '{PAUSE_IMAGE}'
  [{cri_images}.registry]
    config_path = '{d / "certs.d"}'
[{cri_runtime}]
  # Pods' network namespaces are mounted in the node's directory, not in /run/netns.
  netns_mounts_under_state_dir = true
  # Without CAP_SYS_RESOURCE (these machines' root lacks it) no process may lower its
  # oom_score_adj: the runtime clamps the pods' to its own instead of failing them.
  restrict_oom_score_adj = true
  [{cri_runtime}.containerd]
    default_runtime_name = 'runc'
  [{runc}]
    runtime_type = 'io.containerd.runc.v2'
  [{runc}.options]
    BinaryName = '{RUNC}'
    Root = '{d / "runc"}'
    SystemdCgroup = false
  [{cri_runtime}.cni]
    bin_dirs = ['{CNI_PLUGINS}']
    conf_dir = '{d / "cni"}'
    max_conf_num = 1
"""
        )
        return config

    def _kubelet_config(self) -> Path:
        d = self.dir
        (d / "resolv.conf").write_text("")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": self.ports["kubelet"],
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.ports["healthz"],
            "failCgroupV1": False,
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{self.cgroup}",
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "podLogsDir": str(d / "pod-logs"),
            "resolvConf": str(d / "resolv.conf"),
            "clusterDNS": [GATEWAY],
            "clusterDomain": CLUSTER_DOMAIN,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cluster.ca)},
            },
            "authorization": {"mode": "Webhook"},
            # The machine is shared: evict only when it is really out of room.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 99,
            "imageGCLowThresholdPercent": 98,
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "5s",
        }
        path = d / "kubelet.yaml"
        path.write_text(yaml.safe_dump(config))
        return path

    # -- processes -------------------------------------------------------------------------
    def _cgroups(self) -> list[Path]:
        return [h / self.cgroup for h in hierarchies()]

    def _make_cgroups(self) -> None:
        for path in self._cgroups():
            path.mkdir(exist_ok=True)
            if path.parent.name == "cpuset":  # v1 cpuset: empty until given its parent's
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (path / name).write_text((path.parent / name).read_text())
            (path / "runtime").mkdir(exist_ok=True)
            if path.parent.name == "cpuset":
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (path / "runtime" / name).write_text((path / name).read_text())

    def _join_runtime_cgroup(self) -> None:
        """In the child before exec: into `<cgroup>/runtime` of every hierarchy, so the
        process, the shims it starts and their containers are found and ended by stop()."""
        for path in self._cgroups():
            (path / "runtime" / "cgroup.procs").write_text(str(os.getpid()))

    def _spawn(self, name: str, argv: list[str], env: dict | None = None, cwd=None) -> None:
        log = open(self.dir / f"{name}.log", "ab")  # noqa: SIM115 (kept open for the process)

        def prepare():
            self._join_runtime_cgroup()
            self.netns.enter()
            import ctypes

            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)

        self.processes[name] = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd or self.dir,
            env=env,
            start_new_session=True,
            preexec_fn=prepare,
        )

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.dir / f"{name}.log"
        if not path.exists():
            return "(no log)"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _wait(self, name: str, check, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            process = self.processes[name]
            if process.poll() is not None:
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

    def ctr(self, *args: str) -> str:
        done = subprocess.run(
            [str(self.bin / "ctr"), "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise ClusterUnavailable(f"ctr {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    # -- the network namespace ---------------------------------------------------------------
    def _relay_in(self, port: int, listen: str = "127.0.0.1") -> Relay:
        """Connections to `listen`:port inside the namespace go to 127.0.0.1:port outside."""
        relay = Relay((listen, port), ("127.0.0.1", port), listen_ns=self.netns)
        self.relays.append(relay)
        return relay

    def start_network(self) -> None:
        """The namespace, and the relays the node needs: the API server and registries in,
        kubelet's API out (to the same port on the machine's loopback)."""
        self.netns = NetworkNamespace("gantry-node")
        # The bridge the CNI plugin would make with the first pod, made now so the Service
        # range can be routed to it (kube-proxy's rules rewrite a ClusterIP there).
        self.netns.ip("link", "add", "cni0", "type", "bridge")
        self.netns.ip("addr", "add", f"{GATEWAY}/{POD_SUBNET.split('/')[1]}", "dev", "cni0")
        self.netns.ip("link", "set", "cni0", "up")
        self.netns.ip("route", "add", SERVICE_SUBNET, "dev", "cni0")
        self.relayed = {self.cluster.ports["apiserver"]}
        self.relayed |= {int(host.rsplit(":", 1)[1]) for host in self.registry_hosts}
        for port in sorted(self.relayed):
            self._relay_in(port)
        kubelet = self.ports["kubelet"]
        self.relays.append(
            Relay(("127.0.0.1", kubelet), ("127.0.0.1", kubelet), target_ns=self.netns)
        )

    def expose(self, url: str) -> str:
        """`url` (http://127.0.0.1:PORT, e.g. Gantry's live server) as the pods reach it:
        http://GATEWAY:PORT, relayed to the machine's loopback."""
        port = int(url.rstrip("/").rsplit(":", 1)[1])
        if port not in self.exposed:  # the bridge (GATEWAY) comes with the first pod
            self.exposed[port] = self._relay_in(port, listen="0.0.0.0")
        return f"http://{GATEWAY}:{port}"

    def reach(self, port: int, outside: int | None = None) -> int:
        """A port on the machine's loopback (`outside`, or one free) that relays to `port`
        on the namespace's."""
        outside = outside or free_port()
        relay = Relay(("127.0.0.1", outside), ("127.0.0.1", port), target_ns=self.netns)
        self.relays.append(relay)
        return outside

    def run_inside(
        self, name: str, argv: list[str], env: dict, loopback_ports=(), cwd=None
    ) -> subprocess.Popen:
        """A process placed as Gantry's own servers are in a cluster: on the cluster's
        network (inside the namespace, where ClusterIPs work), asking the cluster DNS for
        names (its own resolv.conf, bind-mounted in a mount namespace of its own), and
        reaching `loopback_ports` of the machine's loopback (its database) through relays.
        It runs in the node's cgroup, so stop() ends it if the test did not."""
        for port in loopback_ports:
            if port not in self.relayed:
                self.relayed.add(port)
                self._relay_in(port)
        resolv = self.dir / "cluster-resolv.conf"
        resolv.write_text(
            f"nameserver {GATEWAY}\nsearch {CLUSTER_DOMAIN}\noptions ndots:5\n"
        )
        wrapped = [
            "unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(resolv), *argv,
        ]  # fmt: skip
        self._spawn(name, wrapped, env, cwd=cwd)
        return self.processes[name]

    def start_coredns(self) -> None:
        """The cluster DNS at GATEWAY:53 (listening on the namespace's every address),
        answering cluster.local from the API server (the `kubernetes` plugin): Services,
        and a headless Service's pods by host name (`<job>-0.<job>.<namespace>.svc`)."""
        kubeconfig = self.dir / "coredns.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(self.cluster.kubeconfig_dict()))
        ready = free_port()
        corefile = self.dir / "Corefile"
        corefile.write_text(
            f"""{CLUSTER_DOMAIN}:53 {{
    errors
    ready 127.0.0.1:{ready}
    kubernetes {CLUSTER_DOMAIN} {{
        kubeconfig {kubeconfig}
    }}
}}
"""
        )
        self._spawn("coredns", [str(self.coredns), "-conf", str(corefile)])
        self._wait("coredns", lambda: self._answers_inside(f"http://127.0.0.1:{ready}/ready"))

    def start_kube_proxy(self) -> None:
        """kube-proxy in iptables mode: Services' ClusterIPs work inside the namespace (its
        rules are the namespace's own). It leaves the kernel's connection-tracking limits
        alone (machine-wide) and masquerades all Service traffic, so a pod calling a
        Service that answers from the same bridge gets its reply back through the rules."""
        kubeconfig = self.dir / "kube-proxy.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(self.cluster.kubeconfig_dict()))
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "mode": "iptables",
            "clusterCIDR": POD_SUBNET,
            "hostnameOverride": NODE_NAME,
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            "masqueradeAll": True,
            "conntrack": {
                "maxPerCore": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            "iptables": {"localhostNodePorts": False},
        }
        path = self.dir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        self._spawn(
            "kube-proxy",
            [str(self.cluster.bin / "kube-proxy"), f"--config={path}", "--v=1"],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        healthz = f"http://{config['healthzBindAddress']}/healthz"
        self._wait("kube-proxy", lambda: self._answers_inside(healthz))

    def _answers_inside(self, url: str) -> bool:
        """`url`, inside the namespace, answers 200 (a component's health or ready port)."""
        import urllib.request

        with inside(self.netns.path):
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            return opener.open(url, timeout=2).status == 200

    def start_containerd(self) -> None:
        config = self._containerd_config()
        env = {"PATH": f"{self.bin}:/usr/sbin:/usr/bin:/sbin:/bin"}
        self._spawn("containerd", [str(self.bin / "containerd"), "--config", str(config)], env)
        self._wait("containerd", lambda: self.ctr("version") and True)
        self.ctr("images", "import", str(pause_layout(self.bin / "pause", self.dir)))

    def start_kubelet(self) -> None:
        kubeconfig = self.dir / "kubelet.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(self.cluster.kubeconfig_dict()))
        self._spawn(
            "kubelet",
            [
                str(self.cluster.bin / "kubelet"),
                f"--config={self._kubelet_config()}",
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={NODE_NAME}",
                f"--root-dir={self.dir / 'kubelet'}",
                f"--cert-dir={self.dir / 'kubelet-pki'}",
                "--v=1",
            ],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        from kubernetes import client

        core = client.CoreV1Api(self.cluster.client())

        def ready() -> bool:
            node = core.read_node(NODE_NAME)
            return any(
                c.type == "Ready" and c.status == "True" for c in node.status.conditions or []
            )

        self._wait("kubelet", ready)

    def start(self) -> KubeNode:
        begun = time.monotonic()
        try:
            self._make_cgroups()
            self.start_network()
            self.start_containerd()
            self.start_kubelet()
            self.start_coredns()
            self.start_kube_proxy()
        except BaseException:
            self.stop(keep_logs=True)
            raise
        self.started_seconds = time.monotonic() - begun
        return self

    # -- stopping ------------------------------------------------------------------------
    def _pids(self) -> set[int]:
        pids: set[int] = set()
        for root in self._cgroups():
            for procs in root.rglob("cgroup.procs") if root.exists() else ():
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in procs.read_text().split())
        return pids

    def _shim_sockets(self, pids: set[int]) -> set[str]:
        """The sockets the node's runc shims listen on: machine-wide, in /run/containerd/s
        (a shim removes its own only when it ends cleanly)."""
        inodes = set()
        for pid in pids:
            with contextlib.suppress(OSError):
                for fd in Path(f"/proc/{pid}/fd").iterdir():
                    with contextlib.suppress(OSError):
                        target = os.readlink(fd)
                        if target.startswith("socket:["):
                            inodes.add(target[8:-1])
        paths = set()
        for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) == 8 and fields[6] in inodes and fields[7].startswith("/run/"):
                paths.add(fields[7])
        return paths

    def _mounts(self) -> list[str]:
        """Mount points under the node's directory, deepest first."""
        prefix = str(self.dir) + "/"
        points = [
            line.split()[4]
            for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(prefix)
        ]
        return sorted(set(points), key=len, reverse=True)

    def stop(self, keep_logs: bool = False) -> None:
        # kubelet first, so it restarts nothing; then every process the node started.
        for name in ("kubelet", "containerd", "coredns", "kube-proxy"):
            process = self.processes.pop(name, None)
            if process is not None and process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        self.sockets |= self._shim_sockets(self._pids())
        deadline = time.monotonic() + 30
        while (pids := self._pids()) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        for path in self.sockets:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        for folder in ("/run/containerd/s", "/run/containerd"):  # when no one else uses them
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        for point in self._mounts():
            subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
        for relay in self.relays:
            relay.close()
        self.relays.clear()
        self.exposed.clear()
        if self.netns is not None:
            self.netns.delete()  # its bridge and the pods' other ends with it
        for root in self._cgroups():
            if root.exists():
                for path in sorted(
                    (p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts)
                )[::-1]:
                    with contextlib.suppress(OSError):
                        path.rmdir()
                with contextlib.suppress(OSError):
                    root.rmdir()
        if keep_logs:
            print(f"k8s_node: logs kept in {self.dir}", file=__import__("sys").stderr)
            return
        shutil.rmtree(self.dir, ignore_errors=True)

    def leftovers(self) -> dict:
        """What stop() must leave behind: nothing (processes, mounts, cgroups)."""
        return {
            "processes": sorted(self._pids()),
            "mounts": self._mounts(),
            "cgroups": [str(p) for p in self._cgroups() if p.exists()],
            "sockets": sorted(p for p in self.sockets if os.path.exists(p)),
            "network namespace": [self.netns.name] if self.netns and self.netns.exists() else [],
        }


def main() -> None:
    """platform/dev/k8s-node: the control plane with its kwok nodes and the real node until
    Ctrl-C or SIGTERM; then both stop and nothing is left."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument(
        "--registry", action="append", default=[], metavar="127.0.0.1:PORT",
        help="a registry on loopback the node pulls from over plain HTTP",
    )  # fmt: skip
    parser.add_argument(
        "--expose", action="append", default=[], metavar="http://127.0.0.1:PORT",
        help="a server on loopback the pods reach (Gantry's: set GANTRY_K8S_API_URL to the "
        "address printed for it)",
    )  # fmt: skip
    args = parser.parse_args()
    if any(not host.startswith("127.0.0.1:") for host in args.registry):
        parser.error("--registry must be on 127.0.0.1 (the network rule, see tests/k8s_node.py)")
    if any(not url.startswith("http://127.0.0.1:") for url in args.expose):
        parser.error("--expose must be on http://127.0.0.1 (the network rule)")
    cluster = KubeCluster().start()
    try:
        node = KubeNode(cluster, registry_hosts=tuple(args.registry)).start()
    except BaseException:
        cluster.stop()
        raise
    print(
        f"control plane up in {cluster.started_seconds:.1f} s, node {NODE_NAME} Ready in "
        f"{node.started_seconds:.1f} s (logs in {node.dir})",
        file=sys.stderr,
    )
    for url in args.expose:
        print(f"{url} is {node.expose(url)} for the pods", file=sys.stderr)
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
        node.stop()
        cluster.stop()


if __name__ == "__main__":
    main()
