"""MLflow's error answers: `{"error_code": …, "message": …}` with the client's statuses.

The client reads the code, not the status, for most decisions (RESOURCE_DOES_NOT_EXIST
makes `set_experiment` create the experiment), and retries 5xx answers with backoff, so
nothing a caller did wrong may answer 5xx. INVALID_STATE is 500 in MLflow's server;
here it is 400 for that reason.
"""

from django.http import JsonResponse

STATUS = {
    "INVALID_PARAMETER_VALUE": 400,
    "BAD_REQUEST": 400,
    "RESOURCE_ALREADY_EXISTS": 400,
    "INVALID_STATE": 400,
    "RESOURCE_DOES_NOT_EXIST": 404,
    "ENDPOINT_NOT_FOUND": 404,
    "PERMISSION_DENIED": 403,
    "UNAUTHENTICATED": 401,
    "INTERNAL_ERROR": 500,
    # The store cannot do it (presigned multipart uploads on the filesystem): the client
    # reads 501 as "fall back", as from MLflow's server.
    "NOT_IMPLEMENTED": 501,
}


class MlflowError(Exception):
    def __init__(self, message: str, code: str = "INVALID_PARAMETER_VALUE"):
        super().__init__(message)
        self.message = message
        self.code = code

    def response(self) -> JsonResponse:
        response = JsonResponse(
            {"error_code": self.code, "message": self.message}, status=STATUS[self.code]
        )
        if self.code == "UNAUTHENTICATED":
            response["WWW-Authenticate"] = 'Bearer realm="mlflow"'
        return response


def invalid(message: str) -> MlflowError:
    return MlflowError(message, "INVALID_PARAMETER_VALUE")


def not_found(message: str) -> MlflowError:
    return MlflowError(message, "RESOURCE_DOES_NOT_EXIST")
