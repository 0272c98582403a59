from django.apps import AppConfig


class ModelhubConfig(AppConfig):
    name = "modelhub"
    verbose_name = "Model hub"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # The agent API (jobs) serves model files to prediction jobs, and the job form
        # offers model versions as inputs; jobs may not import modelhub (core.registry).
        from core import registry
        from modelhub import services

        registry.model_file_for_job.register(services.model_file_for_job)
        registry.model_input_choices.register(services.model_input_choices)
        registry.model_input_entry.register(services.model_inputs)
        registry.model_version_of_input.register(services.model_version_of_input)
