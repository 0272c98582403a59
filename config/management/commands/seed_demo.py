from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from accounts.models import Membership, Tenant, TenantRole
from projects.models import Project, ProjectMember, ProjectRole


class Command(BaseCommand):
    help = "Create the demo administrator, tenant and project if they do not exist (idempotent)."

    @transaction.atomic
    def handle(self, *args, **options):
        if settings.GANTRY_ENV == "production":
            # A superuser whose password is in the README would be anyone's.
            raise CommandError(
                "seed_demo creates a superuser with a published password (admin / "
                "$GANTRY_DEMO_PASSWORD) and refuses to run with GANTRY_ENV=production. "
                "Create the first administrator with `manage.py createsuperuser`."
            )
        User = get_user_model()
        admin, created = User.objects.get_or_create(
            username="admin",
            defaults={"is_staff": True, "is_superuser": True, "email": "admin@example.org"},
        )
        if created:
            admin.set_password(settings.GANTRY_DEMO_PASSWORD)
            admin.save()
        tenant, _ = Tenant.objects.get_or_create(
            slug="demo-lab",
            defaults={"name": "Demo Lab", "description": "A tenant to try Gantry in."},
        )
        Membership.objects.get_or_create(
            tenant=tenant, user=admin, defaults={"role": TenantRole.OWNER}
        )
        project, _ = Project.objects.get_or_create(
            tenant=tenant,
            slug="getting-started",
            defaults={
                "name": "Getting started",
                "description": "Run a first training job here.",
                "created_by": admin,
            },
        )
        ProjectMember.objects.get_or_create(
            project=project, user=admin, defaults={"role": ProjectRole.MAINTAINER}
        )
        self.stdout.write(
            f"Demo login: admin / {settings.GANTRY_DEMO_PASSWORD if created else '(password unchanged)'}"
        )
