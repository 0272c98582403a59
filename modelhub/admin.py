from django.contrib import admin

from modelhub.models import Alias, AliasMove, ModelFile, ModelVersion, RegisteredModel


class ModelFileInline(admin.TabularInline):
    model = ModelFile
    extra = 0
    readonly_fields = ["path", "size", "sha256", "file"]
    can_delete = False


class AliasInline(admin.TabularInline):
    model = Alias
    extra = 0
    readonly_fields = ["name", "version", "updated_by", "updated_at"]
    can_delete = False


@admin.register(RegisteredModel)
class RegisteredModelAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "created_by", "updated_at"]
    search_fields = ["name", "description"]
    list_select_related = ["project__tenant", "created_by"]
    inlines = [AliasInline]


@admin.register(ModelVersion)
class ModelVersionAdmin(admin.ModelAdmin):
    list_display = ["__str__", "format", "size", "source_job", "created_at"]
    list_filter = ["format"]
    search_fields = ["model__name", "image_digest"]
    list_select_related = ["model", "source_job"]
    # Versions are immutable: registered through modelhub.services only.
    readonly_fields = [f.name for f in ModelVersion._meta.fields]
    inlines = [ModelFileInline]


@admin.register(AliasMove)
class AliasMoveAdmin(admin.ModelAdmin):
    list_display = ["model", "alias", "from_version", "to_version", "actor", "at"]
    list_select_related = ["model", "from_version__model", "to_version__model", "actor"]
    readonly_fields = ["model", "alias", "from_version", "to_version", "actor", "at"]
