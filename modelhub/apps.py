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
