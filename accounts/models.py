import hashlib
import secrets

from django.conf import settings
from django.contrib.auth.models import AbstractUser
from django.db import models
from django.db.models import Exists, OuterRef
from django.urls import reverse
from django.utils import timezone


class User(AbstractUser):
    """A person who signs in: local account or mapped from the identity provider."""

    email = models.EmailField("email address", blank=True)
    # The identity provider's `sub` for users who sign in with single sign-on: the
    # stable link between the two (usernames can be renamed in the provider).
    oidc_subject = models.CharField(
        "SSO subject", max_length=255, unique=True, null=True, blank=True, editable=False
    )
    # What a bare MLflow experiment or model name means when the user's token or session
    # reaches several projects (tracking.services.access.home_project). accounts sits
    # below projects: the project is named, not imported.
    default_project = models.ForeignKey(
        "projects.Project",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The project a bare MLflow experiment or model name means.",
    )

    class Meta:
        ordering = ["username"]

    def __str__(self):
        return self.get_full_name() or self.username


class TenantRole(models.TextChoices):
    # Ordered from least to most powerful: the permission matrix relies on it.
    MEMBER = "member", "Member"
    ADMIN = "admin", "Admin"
    OWNER = "owner", "Owner"


class MembershipSource(models.TextChoices):
    """Where a tenant or project role came from. Single sign-on manages only its own rows."""

    LOCAL = "local", "Granted in Gantry"
    OIDC = "oidc", "From single sign-on groups"


class TenantQuerySet(models.QuerySet):
    def visible_to(self, user):
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self
        return self.filter(Exists(Membership.objects.filter(tenant=OuterRef("pk"), user=user)))

    def administered_by(self, user):
        """Tenants the user is an owner or admin of (their audit log, say)."""
        return self.filter(
            Exists(
                Membership.objects.filter(
                    tenant=OuterRef("pk"), user=user, role__in=[TenantRole.ADMIN, TenantRole.OWNER]
                )
            )
        )


class Tenant(models.Model):
    """A lab or team: the unit of isolation. Every other row traces back to one tenant."""

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50, unique=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("accounts:tenant_detail", args=[self.pk])

    @property
    def tenant(self):
        return self


class Member(models.Model):
    """What tenant and project memberships share: one user's role in one place, and where
    the role came from. A subclass adds the place (the foreign key `place_field` names),
    the user (with its own related name) and the role with the kind's choices; its
    services are an `accounts.members.MemberService`."""

    place_field = ""

    source = models.CharField(
        max_length=8, choices=MembershipSource.choices, default=MembershipSource.LOCAL
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        abstract = True

    def __str__(self):
        return f"{self.user} in {self.place} ({self.role})"

    @property
    def place(self):
        return getattr(self, self.place_field)

    @classmethod
    def one_role_per_user(cls, place_field: str, name: str) -> list[models.UniqueConstraint]:
        return [models.UniqueConstraint(fields=[place_field, "user"], name=name)]


class MembershipQuerySet(models.QuerySet):
    def visible_to(self, user):
        return self.filter(tenant__in=Tenant.objects.visible_to(user))


class Membership(Member):
    """A user's role in one tenant."""

    place_field = "tenant"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=16, choices=TenantRole.choices, default=TenantRole.MEMBER)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        ordering = ["tenant", "user__username"]
        constraints = Member.one_role_per_user("tenant", "membership_unique_user")

    def get_absolute_url(self):
        return reverse("accounts:tenant_detail", args=[self.tenant_id])


class TokenScope(models.TextChoices):
    READ = "read", "Read only"
    WRITE = "write", "Read and write"


class ApiTokenQuerySet(models.QuerySet):
    def visible_to(self, user):
        if not user.is_authenticated:
            return self.none()
        return self.filter(user=user)

    def update(self, **kwargs):
        """A write other than a last use makes cached tokens stale (accounts.signals)."""
        rows = super().update(**kwargs)
        if rows and set(kwargs) != {"last_used_at"}:
            from accounts.signals import tokens_changed

            tokens_changed()
        return rows

    update.alters_data = True

    def active(self):
        now = timezone.now()
        return self.filter(revoked_at__isnull=True).filter(
            models.Q(expires_at__isnull=True) | models.Q(expires_at__gt=now)
        )


class ApiToken(models.Model):
    """A personal API token. Only a SHA-256 of the secret is stored; the secret is shown once."""

    PREFIX = "gty_"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    key_prefix = models.CharField(max_length=16, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    scope = models.CharField(max_length=8, choices=TokenScope.choices, default=TokenScope.READ)
    project = models.ForeignKey(
        "projects.Project",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="Limit the token to one project.",
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.name} ({self.key_prefix}…)"

    @staticmethod
    def hash_key(key: str) -> str:
        return hashlib.sha256(key.encode()).hexdigest()

    @classmethod
    def generate_key(cls) -> str:
        return cls.PREFIX + secrets.token_urlsafe(32)

    @property
    def is_active(self) -> bool:
        if self.revoked_at:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    @property
    def status(self) -> str:
        if self.revoked_at:
            return "revoked"
        if not self.is_active:
            return "expired"
        return "active"


class InvitationQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Invitations carry people's addresses: only the tenant's owners and admins (and
        lab administrators) see them."""
        if not user.is_authenticated:
            return self.none()
        if user.is_superuser:
            return self
        return self.filter(tenant__in=Tenant.objects.administered_by(user))

    def pending(self):
        return self.filter(
            accepted_at__isnull=True, revoked_at__isnull=True, expires_at__gt=timezone.now()
        )


class Invitation(models.Model):
    """An emailed invitation to join a tenant with a role (and optionally a project role).

    The link carries a random secret; only its SHA-256 is stored, so the table alone
    cannot be used to accept. It works once, until `expires_at`, unless revoked. The roles
    are granted on acceptance, not before (accounts.invitations).
    """

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=16, choices=TenantRole.choices, default=TenantRole.MEMBER)
    # accounts sits below projects: the project and its role are named, not imported.
    project = models.ForeignKey(
        "projects.Project", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    project_role = models.CharField(max_length=16, blank=True)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True, editable=False)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        editable=False,
    )
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    objects = InvitationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"invitation of {self.email} to {self.tenant}"

    def get_absolute_url(self):
        return reverse("accounts:tenant_detail", args=[self.tenant_id])

    @property
    def status(self) -> str:
        if self.accepted_at:
            return "accepted"
        if self.revoked_at:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "pending"
