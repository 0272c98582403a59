"""The usage report in the API: `GET /api/v1/gpu-usage/?tenant=&group=&period=&start=&end=`."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from projects.permissions import token_of
from telemetry.views import report_for


class GpuUsageReportView(APIView):
    """GPU-seconds allocated, used and unmeasured (with GPU-hours to four decimals) per
    tenant, project or user and day, week or month, in rows of jobs and rows of model
    endpoints (with their replica-seconds); the page's report, as JSON."""

    permission_actions = {"*": "authenticated"}

    @extend_schema(
        parameters=[
            OpenApiParameter(name, str, required=False)
            for name in ("tenant", "group", "period", "start", "end")
        ],
        responses={200: OpenApiTypes.OBJECT, 400: OpenApiTypes.OBJECT},
    )
    def get(self, request):
        form, rows, totals = report_for(request, token_of(request))
        if rows is None:
            return Response({"errors": form.errors.get_json_data()}, status=400)
        data = form.cleaned_data
        return Response(
            {
                "start": data["start"].isoformat(),
                "end": data["end"].isoformat(),
                "group": data["group"],
                "period": data["period"],
                "rows": [r.as_dict() for r in rows],
                "totals": totals,
            }
        )
