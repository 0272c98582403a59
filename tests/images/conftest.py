import pytest

from tests.conftest import service_required
from tests.registry import PASSWORD, USERNAME, missing_tools, start_registry


@pytest.fixture(scope="session")
def registry(tmp_path_factory):
    missing = missing_tools()
    service_required(f"the OCI registry tools ({', '.join(missing)})", not missing)
    registry = start_registry(tmp_path_factory.mktemp("registry"))
    yield registry
    registry.stop()


@pytest.fixture
def use_registry(settings, registry):
    """Point Gantry at the test registry."""
    settings.GANTRY_REGISTRY_URL = registry.url
    settings.GANTRY_REGISTRY_USERNAME = USERNAME
    settings.GANTRY_REGISTRY_PASSWORD = PASSWORD
    return registry
