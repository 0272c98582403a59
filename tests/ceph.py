"""A throwaway single-node Ceph cluster with a RADOS Gateway, for the S3 tests and the benchmark.

One monitor, one OSD on `memstore` (data lives in RAM) and one radosgw (beast),
all on 127.0.0.1, started by hand without systemd from Debian's packages
(`apt-get install -y --no-install-recommends ceph-mon ceph-osd radosgw`). Ready
for S3 in a few seconds, about 110 MiB of memory. No mgr is needed.

    with CephCluster() as ceph:
        ceph.endpoint, ceph.access_key, ceph.secret_key

Also runnable by hand: `python tests/ceph.py` starts one and waits for Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from core.ports import free_port

DAEMONS = ("ceph-mon", "ceph-osd", "radosgw")


def available() -> bool:
    return all(shutil.which(name) for name in (*DAEMONS, "ceph", "radosgw-admin", "monmaptool"))


class CephError(RuntimeError):
    pass


class CephCluster:
    """Start with `start()` (or `with`), stop with `stop()`; everything lives in one temp dir."""

    def __init__(self, root: str | None = None):
        self.root = Path(root or tempfile.mkdtemp(prefix="gantry-ceph-"))
        self.mon_port = free_port()
        self.rgw_port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.rgw_port}"
        self.access_key = "gantry-test-access"
        self.secret_key = "gantry-test-secret-key-0123456789"
        self.conf = self.root / "ceph.conf"
        self.fsid = _uuid()

    # --- lifecycle --------------------------------------------------------------

    def start(self) -> CephCluster:
        try:
            self._write_conf()
            self._start_mon()
            self._start_osd()
            self._start_rgw()
            self._create_user()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        # Gateway first, then OSD, then monitor: each needs the next to shut down cleanly.
        for name in ("rgw", "osd", "mon"):
            pid = self._pid(name)
            if pid:
                _terminate(pid)
        if not os.environ.get("GANTRY_CEPH_KEEP"):
            shutil.rmtree(self.root, ignore_errors=True)

    def stop_gateway(self) -> None:
        """Take the object store away (the monitor and OSD keep the data)."""
        pid = self._pid("rgw")
        if pid:
            _terminate(pid)
        (self.root / "run" / "client.rgw.gantry.pid").unlink(missing_ok=True)

    def start_gateway(self) -> None:
        self._start_rgw()

    def __enter__(self) -> CephCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # --- steps ------------------------------------------------------------------

    def _write_conf(self) -> None:
        r = self.root
        for sub in ("mon", "osd", "run", "log", "rgw"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            f"""[global]
fsid = {self.fsid}
mon host = v2:127.0.0.1:{self.mon_port}
mon initial members = a
public network = 127.0.0.0/8
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
mon allow pool size one = true
mon allow pool delete = true
paxos propose interval = 0.1
mon warn on pool no redundancy = false
# The monitor refuses to start below 5% free disk by default: on a large shared disk
# that can still be many GiB (the test cluster's data is in memory, memstore).
mon data avail crit = 1
mon data avail warn = 2
osd objectstore = memstore
memstore device bytes = 4294967296
osd data = {r}/osd/$cluster-$id
osd journal size = 0
mon data = {r}/mon/$cluster-$id
run dir = {r}/run
pid file = {r}/run/$name.pid
admin socket = {r}/run/$name.asok
log file = {r}/log/$name.log
keyring = {r}/keyring
osd crush chooseleaf type = 0
osd max object name len = 256
osd max object namespace len = 64

[client.rgw.gantry]
rgw frontends = beast endpoint=127.0.0.1:{self.rgw_port}
rgw data = {r}/rgw
rgw gc obj min wait = 0
rgw gc processor period = 5
rgw exit timeout secs = 5
rgw dns name = 127.0.0.1
rgw thread pool size = 64
"""
        )

    def _run(self, *args: str, timeout: float = 60) -> str:
        cmd = [*args, "-c", str(self.conf)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode:
            raise CephError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
        return proc.stdout

    def _start_mon(self) -> None:
        keyring = str(self.root / "keyring")
        subprocess.run(
            ["ceph-authtool", "--create-keyring", keyring, "--gen-key", "-n", "mon.",
             "--cap", "mon", "allow *"],
            check=True, capture_output=True,
        )  # fmt: skip
        monmap = str(self.root / "monmap")
        subprocess.run(
            ["monmaptool", "--create", "--fsid", self.fsid, "--addv", "a",
             f"[v2:127.0.0.1:{self.mon_port}]", monmap],
            check=True, capture_output=True,
        )  # fmt: skip
        self._run("ceph-mon", "--mkfs", "-i", "a", "--monmap", monmap, "--keyring", keyring)
        self._run("ceph-mon", "-i", "a")
        self._wait(lambda: self._ceph_ok("mon", "stat"), "the monitor", 30)

    def _start_osd(self) -> None:
        osd_uuid = _uuid()
        osd_id = self._run("ceph", "osd", "new", osd_uuid).strip()
        self.osd_id = osd_id
        (self.root / "osd" / f"ceph-{osd_id}").mkdir(parents=True, exist_ok=True)
        self._run("ceph-osd", "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid)
        self._run("ceph-osd", "-i", osd_id)

        def up():
            out = self._ceph_out("osd", "dump", "--format", "json")
            return out and any(o["up"] for o in json.loads(out)["osds"])

        self._wait(up, f"osd.{osd_id} up", 60)

    def _start_rgw(self) -> None:
        # radosgw forks; `timeout` bounds the parent if the monitor handshake hangs.
        self._run("timeout", "60", "radosgw", "-n", "client.rgw.gantry", timeout=70)

        def answers():
            try:
                with urllib.request.urlopen(self.endpoint, timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        self._wait(answers, "radosgw", 60)

    def _create_user(self) -> None:
        self._run(
            "radosgw-admin", "-n", "client.rgw.gantry", "user", "create", "--uid", "gantry",
            "--display-name", "Gantry tests", "--access-key", self.access_key,
            "--secret", self.secret_key,
        )  # fmt: skip

    # --- helpers ----------------------------------------------------------------

    def _ceph_out(self, *args: str) -> str | None:
        try:
            return self._run("ceph", "--connect-timeout", "5", *args, timeout=15)
        except (CephError, subprocess.TimeoutExpired):
            return None

    def _ceph_ok(self, *args: str) -> bool:
        return self._ceph_out(*args) is not None

    def _wait(self, ready, what: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.2)
        logs = "".join(
            f"\n--- {p.name}\n" + p.read_text(errors="replace")[-1500:]
            for p in (self.root / "log").glob("*.log")
        )
        raise CephError(f"timed out waiting for {what}{logs}")

    def _pid(self, name: str) -> int | None:
        files = {
            "mon": ["mon.a.pid"],
            "osd": [f"osd.{getattr(self, 'osd_id', 0)}.pid"],
            "rgw": ["client.rgw.gantry.pid"],
        }[name]
        for f in files:
            p = self.root / "run" / f
            if p.exists():
                try:
                    return int(p.read_text().strip())
                except ValueError:
                    return None
        return None


def _uuid() -> str:
    import uuid

    return str(uuid.uuid4())


def _alive(pid: int) -> bool:
    # The daemons fork and get reparented: a zombie still answers kill -0.
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def _terminate(pid: int, grace: float = 5.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _alive(pid):
            return
        time.sleep(0.1)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(50):
        if not _alive(pid):
            return
        time.sleep(0.1)


if __name__ == "__main__":
    with CephCluster() as cluster:
        print(
            f"S3_ENDPOINT_URL={cluster.endpoint} S3_ACCESS_KEY_ID={cluster.access_key} "
            f"S3_SECRET_ACCESS_KEY={cluster.secret_key}",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
