"""The Kubernetes backend: `backend.py` (the `Backend`), `manifests.py` (what a job becomes
in the cluster), `client.py` (registered clusters and API calls), `stream.py` (list-then-
watch) and `watch.py` (what pods and Jobs say, reported to `jobs.services`)."""
