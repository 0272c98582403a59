"""Model files for prediction jobs: the executor stages them with its job token.

A job token reaches only the files of model versions in the job's own project;
anything else answers the same 404 as a file that does not exist.
"""

from django.http import FileResponse, JsonResponse
from django.urls import path
from django.views.decorators.http import require_GET

from jobs import services as job_services
from jobs.models import Job
from modelhub.models import ModelFile


@require_GET
def model_file(request, pk: int):
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    parsed = job_services.parse_token(token.strip()) if scheme.lower() == "bearer" else None
    if parsed is None:
        response = JsonResponse({"detail": "A job token is required."}, status=401)
        response["WWW-Authenticate"] = 'Bearer realm="executor"'
        return response
    job = Job.objects.filter(token_hash=Job.hash_token(parsed[1])).only("pk").first()
    found = job_services.executor_job(job.pk, token.strip()) if job else None
    model_file = (
        ModelFile.objects.select_related("version__model")
        .filter(pk=pk, version__model__project_id=found[0].project_id)
        .first()
        if found
        else None
    )
    if model_file is None:
        return JsonResponse({"detail": "Not found."}, status=404)
    return FileResponse(
        model_file.file.open("rb"), as_attachment=True, filename=model_file.path.rsplit("/", 1)[-1]
    )


urlpatterns = [path("model-files/<int:pk>", model_file, name="modelhub-executor-file")]
