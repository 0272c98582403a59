"""MLflow 3's `/api/3.0/mlflow/server-info`: what the server can do, which clients read
before they authenticate (MLflow's server answers it without a login; it names no
tenant, user or address). The keys are those of MLflow's
`mlflow.server.handlers.build_server_info_payload`, with Gantry's answers. The presigned
multipart upload (tracking.multipart, S3 only) is not advertised, as MLflow's server
does not advertise it unless its operator opts in: its parts go straight to the object
store, which a sandboxed job (loopback only, through the executor's relay) cannot
reach. A client outside a job opts in with MLFLOW_ENABLE_PROXY_MULTIPART_UPLOAD=true.
Multipart downloads, traces, workspaces, skills and the AI gateway are not offered.
"""

from django.http import JsonResponse
from django.views.decorators.http import require_GET


@require_GET
def server_info(request):
    return JsonResponse(
        {
            # MLflow names its own stores only (FileStore, SqlStore); Gantry is neither.
            "store_type": None,
            "workspaces_enabled": False,
            "trace_archival_enabled": False,
            "multipart_uploads_enabled": False,
            "multipart_downloads_enabled": False,
            "artifact_serving_enabled": True,
            "presigned_upload_run_id_supported": False,
            "presigned_upload_model_id_supported": False,
            "model_artifact_presigned_downloads_supported": False,
            "features_enabled": {"gateway": False, "scheduled_issue_detection": False},
            "tracking_auth": "",
            "artifacts_presigned_only": False,
        }
    )
