"""The /api/v1/ router: every app registers its viewsets here."""

from rest_framework.routers import DefaultRouter

from accounts.api import ApiTokenViewSet, InvitationViewSet, MembershipViewSet, TenantViewSet
from checkpoints.api import CheckpointViewSet
from datasets.api import (
    DatasetFileViewSet,
    DatasetVersionViewSet,
    DatasetViewSet,
    UploadSessionViewSet,
)
from endpoints.api import EndpointViewSet
from images.api import ImageBuildViewSet, RuntimeImageViewSet
from jobs.api import ArtifactViewSet, JobViewSet
from modelhub.api import ModelVersionViewSet, RegisteredModelViewSet
from notifications.api import SubscriptionViewSet
from projects.api import ProjectMemberViewSet, ProjectViewSet
from sweeps.api import SweepViewSet

router = DefaultRouter()
router.include_root_view = False
router.register("tenants", TenantViewSet, basename="tenant")
router.register("memberships", MembershipViewSet, basename="membership")
router.register("projects", ProjectViewSet, basename="project")
router.register("project-members", ProjectMemberViewSet, basename="projectmember")
router.register("tokens", ApiTokenViewSet, basename="apitoken")
router.register("invitations", InvitationViewSet, basename="invitation")
router.register("jobs", JobViewSet, basename="job")
router.register("artifacts", ArtifactViewSet, basename="artifact")
router.register("checkpoints", CheckpointViewSet, basename="checkpoint")
router.register("images", RuntimeImageViewSet, basename="image")
router.register("image-builds", ImageBuildViewSet, basename="imagebuild")
router.register("models", RegisteredModelViewSet, basename="registeredmodel")
router.register("model-versions", ModelVersionViewSet, basename="modelversion")
router.register("datasets", DatasetViewSet, basename="dataset")
router.register("dataset-versions", DatasetVersionViewSet, basename="datasetversion")
router.register("dataset-files", DatasetFileViewSet, basename="datasetfile")
router.register("uploads", UploadSessionViewSet, basename="uploadsession")
router.register("sweeps", SweepViewSet, basename="sweep")
router.register("endpoints", EndpointViewSet, basename="endpoint")
router.register("notification-subscriptions", SubscriptionViewSet, basename="subscription")
