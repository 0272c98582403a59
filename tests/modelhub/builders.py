"""Objects of the images and model hub apps for the generated access test (tests/test_access.py),
built through the services like a user would."""

import io

from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings

from images import services as image_services
from images.models import ImageBuild, RuntimeImage
from modelhub import services as hub_services
from modelhub.models import ModelVersion, RegisteredModel

# A registry address nothing listens on: building is only queued, never run, here.
FAKE_REGISTRY = "127.0.0.1:9"


def safetensors_bytes() -> bytes:
    header = b'{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    return len(header).to_bytes(8, "little") + header + b"\x00\x00\x80\x3f"


def access_objects(tenant, project, owner):
    image = image_services.create_image(
        owner,
        tenant,
        name="lab base",
        reference=f"{FAKE_REGISTRY}/lab-a/base:1",
        python_version="3.11",
    )
    with override_settings(GANTRY_REGISTRY_URL=f"http://{FAKE_REGISTRY}"):
        build = image_services.start_build(
            owner,
            image,
            tenant,
            name="lab custom",
            files=[("/opt/app/hello.txt", io.BytesIO(b"hello"))],
        )
    model = hub_services.create_model(owner, project, name="digits")
    version = hub_services.upload_version(
        owner, model, [("model.safetensors", SimpleUploadedFile("m", safetensors_bytes()))]
    )
    return {RuntimeImage: image, ImageBuild: build, RegisteredModel: model, ModelVersion: version}
