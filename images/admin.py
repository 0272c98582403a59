from django.contrib import admin

from images.models import ImageBuild, RuntimeImage


@admin.register(RuntimeImage)
class RuntimeImageAdmin(admin.ModelAdmin):
    list_display = ["name", "framework", "framework_version", "cuda_version", "tenant", "legacy"]
    list_filter = ["framework", "visibility", "legacy"]
    search_fields = ["name", "repository", "tag", "digest"]
    list_select_related = ["tenant"]
    readonly_fields = ["registry", "repository", "tag", "digest", "resolved_at", "labels"]

    def save_model(self, request, obj, form, change):
        # Lab administrators re-point catalog images here; keep the parsed parts in step.
        from images.reference import parse_reference

        ref = parse_reference(obj.reference)
        obj.reference = str(ref)
        obj.registry, obj.repository, obj.tag = ref.registry, ref.repository, ref.tag
        if "reference" in form.changed_data:
            obj.digest, obj.resolved_at = ref.digest, None
        super().save_model(request, obj, form, change)


@admin.register(ImageBuild)
class ImageBuildAdmin(admin.ModelAdmin):
    list_display = ["id", "name", "tenant", "base", "state", "created_at"]
    list_filter = ["state"]
    search_fields = ["name", "target"]
    list_select_related = ["tenant", "base"]
    # Builds are run by images.tasks; the admin only looks.
    readonly_fields = [f.name for f in ImageBuild._meta.fields]

