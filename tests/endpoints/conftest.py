# The Kubernetes control plane of the live tests (tests/k8s_cluster.py, started once per
# worker): the endpoint's objects run on the same one the jobs' do.
from tests.jobs.test_k8s_live import kube  # noqa: F401
