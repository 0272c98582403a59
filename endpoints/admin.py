from django.contrib import admin

from core.admin import ReadOnlyAdmin
from endpoints.models import Endpoint, EndpointRequest, EndpointToken, EndpointVersionStats


@admin.register(Endpoint)
class EndpointAdmin(ReadOnlyAdmin):
    """Endpoints change through their page, the API and the CLI (endpoints.services)."""

    list_display = ["__str__", "model", "alias", "serving_version", "state", "replicas", "backend"]
    list_filter = ["state", "backend"]
    search_fields = ["name", "project__name", "model__name"]
    list_select_related = ["project__tenant", "model", "serving_version"]


@admin.register(EndpointToken)
class EndpointTokenAdmin(ReadOnlyAdmin):
    list_display = ["__str__", "endpoint", "created_by", "created_at", "revoked_at"]
    list_select_related = ["endpoint__project__tenant", "created_by"]


@admin.register(EndpointRequest)
class EndpointRequestAdmin(ReadOnlyAdmin):
    list_display = ["endpoint", "at", "method", "path", "status", "latency_ms", "version_number"]
    list_filter = ["status"]
    list_select_related = ["endpoint__project__tenant"]


@admin.register(EndpointVersionStats)
class EndpointVersionStatsAdmin(ReadOnlyAdmin):
    list_display = ["endpoint", "version_number", "requests", "errors"]
    list_select_related = ["endpoint__project__tenant"]
