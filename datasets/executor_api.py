"""The one dataset endpoint the executor talks to: a job input file, by job token.

Used with the filesystem backend (with S3 the spec carries presigned GETs). The token
must be good for the job in the URL and the file must belong to a version the job
names in its inputs; anything else is the same 404.
"""

from django.http import JsonResponse
from django.urls import path

from datasets import downloads, services
from datasets.models import DatasetFile
from jobs.executor_api import executor_view


@executor_view("GET")
def input_file(request, job, rank, pk: int):
    file = DatasetFile.objects.filter(pk=pk).first()
    if file is None or not services.executor_may_read(job, file):
        return JsonResponse({"detail": "Not found."}, status=404)
    return downloads.file_response(file)


app_name = "datasets_executor"
urlpatterns = [
    path("jobs/<int:job_id>/dataset-files/<int:pk>", input_file, name="file"),
]
