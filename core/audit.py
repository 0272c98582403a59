"""Recording audit events from services. The request's client address is taken from
a context variable set by middleware, so services need not be handed the request."""

import contextvars

from core.models import AuditEvent

client_ip = contextvars.ContextVar("client_ip", default=None)


def record(actor, action: str, obj=None, *, tenant=None, **details) -> AuditEvent:
    if tenant is None and obj is not None:
        tenant = getattr(obj, "tenant", None)
    return AuditEvent.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        actor_name=getattr(actor, "username", "") or "system",
        action=action,
        tenant=tenant,
        object_type=obj._meta.model_name if obj is not None else "",
        object_id=str(obj.pk) if obj is not None else "",
        object_repr=str(obj)[:200] if obj is not None else "",
        details=details,
        ip_address=client_ip.get(),
    )
