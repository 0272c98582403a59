"""/api/v1/notification-subscriptions/: the same subscriptions as the pages, through the
same services; `deliveries/` is a subscription's log."""

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.api import MatrixPermission, RestrictedViewSetMixin, VisibleRelatedField
from notifications import services
from notifications.models import Channel, Delivery, Event, Subscription
from projects.models import Project


class SubscriptionSerializer(serializers.ModelSerializer):
    project = VisibleRelatedField(queryset=Project.objects.all(), required=False, allow_null=True)
    personal = serializers.BooleanField(
        default=False,
        help_text="The requester's own subscription (their jobs, or every job of `project` "
        "they can see), rather than the project's.",
    )
    channel = serializers.ChoiceField(choices=Channel.choices)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=Event.choices), min_length=1, max_length=20
    )
    url = serializers.URLField(max_length=500, required=False, allow_blank=True)
    email = serializers.EmailField(max_length=254, required=False, allow_blank=True)

    class Meta:
        model = Subscription
        fields = ["id", "project", "personal", "name", "channel", "url", "email", "events",
                  "active", "created_at", "email_confirmed_at"]
        read_only_fields = ["id", "created_at", "email_confirmed_at"]
        extra_kwargs = {
            "email_confirmed_at": {
                "help_text": "When the address said yes (the link mailed to it); nothing is "
                "mailed to it before. Set at once for the requester's own address."
            }
        }


class NewSubscriptionSerializer(SubscriptionSerializer):
    secret = serializers.CharField(
        read_only=True, help_text="A webhook's signing secret. Shown once, never again."
    )

    class Meta(SubscriptionSerializer.Meta):
        fields = [*SubscriptionSerializer.Meta.fields, "secret"]


class SubscriptionUpdateSerializer(SubscriptionSerializer):
    class Meta(SubscriptionSerializer.Meta):
        read_only_fields = [
            "id", "project", "personal", "channel", "created_at", "email_confirmed_at"
        ]


class DeliverySerializer(serializers.ModelSerializer):
    event = serializers.CharField(
        read_only=True,
        help_text="One of the subscription events, or `ping` for “Send a test”.",
    )

    class Meta:
        model = Delivery
        fields = ["id", "event", "job", "state", "attempts", "last_status", "last_error",
                  "next_attempt_at", "created_at", "delivered_at", "payload"]
        read_only_fields = fields


class SubscriptionPermission(MatrixPermission):
    """A personal subscription answers to its owner alone: the queryset holds only the
    requester's own, so reaching one is permission enough."""

    def has_object_permission(self, request, view, obj):
        if obj.personal:
            return True
        return super().has_object_permission(request, view, obj)


class SubscriptionViewSet(
    RestrictedViewSetMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    queryset = Subscription.objects.none()
    serializer_class = SubscriptionSerializer
    permission_classes = [SubscriptionPermission]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    permission_actions = {
        "list": "notification.view",
        "retrieve": "notification.view",
        "deliveries": "notification.view",
        "create": "authenticated",  # the service checks the project (or that it is yours)
        "partial_update": "notification.manage",
        "destroy": "notification.manage",
        "test": "notification.manage",
    }

    def get_queryset(self):
        return super().get_queryset().select_related("project")

    def get_serializer_class(self):
        if self.action == "partial_update":
            return SubscriptionUpdateSerializer
        if self.action == "deliveries":
            return DeliverySerializer
        return super().get_serializer_class()

    @extend_schema(responses={201: NewSubscriptionSerializer})
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        subscription, secret = services.create_subscription(
            request.user,
            personal=data.pop("personal", False),
            project=data.pop("project", None),
            **{k: v for k, v in data.items() if k != "active"},
        )
        body = NewSubscriptionSerializer(subscription, context={"request": request}).data
        body["secret"] = secret
        return Response(body, status=status.HTTP_201_CREATED)

    def perform_update(self, serializer):
        serializer.instance = services.update_subscription(
            self.request.user, serializer.instance, **serializer.validated_data
        )

    def perform_destroy(self, instance):
        services.delete_subscription(self.request.user, instance)

    @extend_schema(responses={200: DeliverySerializer(many=True)})
    @action(detail=True, methods=["get"])
    def deliveries(self, request, pk=None):
        subscription = self.get_object()
        rows = Delivery.objects.filter(subscription=subscription).order_by("-pk")
        page = self.paginate_queryset(rows)
        return self.get_paginated_response(DeliverySerializer(page, many=True).data)

    @extend_schema(request=None, responses={200: DeliverySerializer})
    @action(detail=True, methods=["post"])
    def test(self, request, pk=None):
        """Send a test message now; the answer is its delivery (delivered or not)."""
        row = services.send_test(request.user, self.get_object())
        return Response(DeliverySerializer(row).data)
