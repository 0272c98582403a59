from django.contrib import admin

from datasets.models import (
    ArchiveImport,
    Blob,
    Dataset,
    DatasetVersion,
    StorageQuota,
    UploadSession,
)


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "project", "created_by", "created_at"]
    search_fields = ["name", "slug", "description"]
    list_select_related = ["project__tenant", "created_by"]


@admin.register(DatasetVersion)
class DatasetVersionAdmin(admin.ModelAdmin):
    # Versions are immutable: the admin only looks.
    list_display = ["dataset", "number", "source", "file_count", "total_size", "created_at"]
    list_filter = ["source"]
    readonly_fields = [f.name for f in DatasetVersion._meta.fields]
    list_select_related = ["dataset"]


@admin.register(UploadSession)
class UploadSessionAdmin(admin.ModelAdmin):
    list_display = ["id", "dataset", "state", "backend", "reserved_bytes", "updated_at"]
    list_filter = ["state", "backend"]
    readonly_fields = [f.name for f in UploadSession._meta.fields]


@admin.register(ArchiveImport)
class ArchiveImportAdmin(admin.ModelAdmin):
    list_display = ["id", "dataset", "file_name", "state", "created_at"]
    list_filter = ["state"]
    readonly_fields = [f.name for f in ArchiveImport._meta.fields]


@admin.register(Blob)
class BlobAdmin(admin.ModelAdmin):
    list_display = ["sha256", "size", "created_at"]
    search_fields = ["sha256"]
    readonly_fields = ["sha256", "size", "created_at"]


@admin.register(StorageQuota)
class StorageQuotaAdmin(admin.ModelAdmin):
    """Lab administrators set a tenant's dataset storage here (the default is a setting)."""

    list_display = ["tenant", "bytes"]
