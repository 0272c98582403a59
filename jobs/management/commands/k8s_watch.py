"""Watch the pods and Jobs Gantry made on Kubernetes and report them to the jobs services.

Runs in the foreground until SIGTERM / Ctrl-C (platform/k8s/watch.yaml runs it as its own
Deployment with one replica). One pod watch and one Job watch per cluster, each in a
thread; see jobs/compute/kubernetes/watch.py for what is reported.
"""

import signal
import threading

from django.core.management.base import BaseCommand, CommandError

from jobs.compute.kubernetes.backend import KubernetesBackend
from jobs.compute.kubernetes.client import ClusterError, registered_clusters
from jobs.compute.kubernetes.watch import watches_for


class Command(BaseCommand):
    help = "Watch Gantry's pods and Jobs on every registered Kubernetes cluster."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", action="append", help="Only this cluster (repeatable).")
        parser.add_argument(
            "--once", action="store_true", help="List once, report, and exit (no watch)."
        )

    def handle(self, *args, cluster=None, once=False, **options):
        from jobs.compute import get_backend

        backend = get_backend("kubernetes")
        assert isinstance(backend, KubernetesBackend)
        refs = [r for r in registered_clusters() if not cluster or r.name in cluster]
        if not refs:
            raise CommandError(f"No registered Kubernetes cluster named {', '.join(cluster)}.")
        watches = []
        for ref in refs:
            try:
                watches += watches_for(backend, ref)
            except ClusterError as exc:
                raise CommandError(str(exc)) from exc
        if once:
            for w in watches:
                w.relist()
            self.stdout.write(f"listed {len(watches)} resources on {len(refs)} cluster(s)")
            return
        stop = threading.Event()

        def on_signal(signum, frame):
            stop.set()
            for w in watches:
                w.stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        threads = [threading.Thread(target=w.run, args=(stop,), daemon=True) for w in watches]
        for t in threads:
            t.start()
        self.stdout.write(f"watching {len(refs)} cluster(s): {', '.join(r.name for r in refs)}")
        while not stop.wait(1):
            if not all(t.is_alive() for t in threads):
                raise CommandError("a watch thread died")
