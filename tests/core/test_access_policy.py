"""core asks the permission matrix through core.access, whose functions are extension
points of core.registry answered by projects.permissions; a point nobody answers is a
readable configuration error."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from core import access, registry
from projects import permissions


def test_projects_answers_core_access(db, member, outsider, project):
    assert access.can is registry.can
    assert registry.can.providers == [permissions.can]
    assert access.can(member, "project.view", project)
    assert not access.can(outsider, "project.view", project)
    assert access.view_action_of("project.change") == "project.view"
    assert access.AUTHENTICATED == permissions.AUTHENTICATED


def test_no_policy_is_a_readable_configuration_error():
    with (
        registry.can.replaced_by(),
        pytest.raises(ImproperlyConfigured, match="Nothing provides the extension point can: projects"),
    ):
        access.can(None, "project.view", None)


def test_a_point_takes_one_provider():
    with pytest.raises(ImproperlyConfigured, match="already provided by projects.permissions.can"):
        registry.can.register(lambda user, action, obj, token=None: True)
    registry.can.register(permissions.can)  # the same one again changes nothing
    assert registry.can.providers == [permissions.can]
