"""Dataset tests run on both storage backends: files under tmp_path, or a real Ceph
cluster (tests/ceph.py) started once per session. Nothing is mocked."""

import os

import pytest

from datasets.services import catalog
from tests import ceph as ceph_cluster
from tests.conftest import service_required


@pytest.fixture
def fs_storage(settings, tmp_path):
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": tmp_path / "files"},
        },
    }
    settings.GANTRY_UPLOAD_PART_MB = 5
    return tmp_path / "files"


@pytest.fixture(scope="session")
def ceph():
    """A single-node Ceph with a RADOS Gateway for the whole session (about 3 s to start)."""
    if not ceph_cluster.available():
        service_required("Ceph (apt-get install ceph-mon ceph-osd radosgw)", False)
    cluster = ceph_cluster.CephCluster()
    try:
        cluster.start()
    except ceph_cluster.CephError as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Ceph did not start: {exc}")
        pytest.skip(f"Ceph did not start: {exc}")
    yield cluster
    cluster.stop()


@pytest.fixture
def s3_storage(settings, ceph, request):
    """The default storage on the Ceph gateway, one fresh bucket per test."""
    import re

    bucket = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + "-b"
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "endpoint_url": ceph.endpoint,
                "bucket_name": bucket,
                "access_key": ceph.access_key,
                "secret_key": ceph.secret_key,
                "region_name": "us-east-1",
                "addressing_style": "path",
                "signature_version": "s3v4",
                "file_overwrite": False,
                "default_acl": None,
            },
        },
    }
    settings.GANTRY_UPLOAD_PART_MB = 5
    from datasets import storage

    storage.configure_bucket(origins=["http://testserver"])
    yield ceph
    storage.delete_prefix("")
    client = storage.s3_client()
    for upload in client.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
        client.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
    client.delete_bucket(Bucket=bucket)


@pytest.fixture
def dataset(project, owner):
    return catalog.create_dataset(owner, project, name="Digits", slug="digits")
