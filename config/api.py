"""The /api/v1/ router: every app registers its viewsets here."""

from rest_framework.routers import DefaultRouter

from accounts.api import ApiTokenViewSet, MembershipViewSet, TenantViewSet
from jobs.api import ArtifactViewSet, JobViewSet
from projects.api import ProjectMemberViewSet, ProjectViewSet

router = DefaultRouter()
router.include_root_view = False
router.register("tenants", TenantViewSet, basename="tenant")
router.register("memberships", MembershipViewSet, basename="membership")
router.register("projects", ProjectViewSet, basename="project")
router.register("project-members", ProjectMemberViewSet, basename="projectmember")
router.register("tokens", ApiTokenViewSet, basename="apitoken")
router.register("jobs", JobViewSet, basename="job")
router.register("artifacts", ArtifactViewSet, basename="artifact")
