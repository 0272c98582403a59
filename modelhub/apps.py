from django.apps import AppConfig


class ModelhubConfig(AppConfig):
    name = "modelhub"
    verbose_name = "Model hub"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from jobs import executor_api
        from modelhub.services import model_file_for_job

        # The agent API (jobs) serves model files to prediction jobs; jobs may not import
        # modelhub, so modelhub hands in how to find one.
        executor_api.find_model_files_with(model_file_for_job)
        # The job form's inputs picker offers model versions of the job's project.
        from jobs.forms import offer_model_inputs
        from modelhub.models import ModelVersion
        from modelhub.services import model_inputs

        offer_model_inputs(
            lambda user, project: ModelVersion.objects.visible_to(user)
            .filter(model__project=project)
            .select_related("model")
            .order_by("model__name", "-number"),
            model_inputs,
            lambda project, entry: ModelVersion.objects.filter(
                model__project=project, model_id=entry.get("model"), number=entry.get("model_version")
            ).values_list("pk", flat=True).first(),
        )
