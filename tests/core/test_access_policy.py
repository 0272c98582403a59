"""core asks the permission matrix through core.access: the module GANTRY_ACCESS_POLICY
names answers, and a missing setting is a readable configuration error."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from core import access
from projects import permissions


@pytest.fixture
def fresh_policy():
    access.policy.cache_clear()
    yield
    access.policy.cache_clear()


def test_the_configured_module_answers(fresh_policy, settings, db, member, outsider, project):
    settings.GANTRY_ACCESS_POLICY = "projects.permissions"
    assert access.policy() is permissions
    assert access.can(member, "project.view", project)
    assert not access.can(outsider, "project.view", project)
    assert access.view_action_of("project.change") == "project.view"
    assert access.AUTHENTICATED == permissions.AUTHENTICATED


def test_no_policy_is_a_readable_configuration_error(fresh_policy, settings):
    settings.GANTRY_ACCESS_POLICY = ""
    with pytest.raises(ImproperlyConfigured, match="GANTRY_ACCESS_POLICY must name the module"):
        access.can(None, "project.view", None)
