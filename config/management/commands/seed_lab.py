"""Seed a lab-scale data set for load tests: tenants, projects, users, jobs (and datasets
when that app is installed). Rows are made with bulk_create: this is test data, not
something a user did, so it does not go through the services or the audit log."""

import random
from datetime import timedelta

from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.core.management.base import BaseCommand
from django.db import connection, transaction
from django.utils import timezone

from accounts.models import ApiToken, Membership, Tenant, TenantRole
from projects.models import Project, ProjectMember, ProjectRole

# A lab's history: most jobs long finished, 1% waiting in the queue for 2-8 GPUs. On
# the load benchmark's machine (bench/settings.py: one GPU) they keep waiting, with their
# reasons, rather than turning into processes mid-benchmark. No job is seeded "running":
# without a process behind it, the worker would mark it lost.
STATES = ["succeeded"] * 700 + ["failed"] * 120 + ["cancelled"] * 170 + ["queued"] * 10


class Command(BaseCommand):
    help = "Seed lab-scale data for benchmarks (idempotent per prefix: run on an empty database)."

    def add_arguments(self, parser):
        parser.add_argument("--tenants", type=int, default=100)
        parser.add_argument("--projects", type=int, default=1000)
        parser.add_argument("--users", type=int, default=300)
        parser.add_argument("--jobs", type=int, default=100_000)
        parser.add_argument("--datasets", type=int, default=10_000)
        parser.add_argument("--tokens-file", default="", help="Write 'username token' lines here.")

    def handle(self, *args, **options):
        self.seed(**options)
        if connection.vendor == "postgresql":
            # What autovacuum does a while after a bulk load: planner statistics (without
            # them a benchmark measures plans made for empty tables) and the visibility
            # map (index-only counts). A lab's database in its steady state has both.
            # (Inside a transaction, as in tests, VACUUM cannot run: statistics only.)
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE" if connection.in_atomic_block else "VACUUM ANALYZE")

    @transaction.atomic
    def seed(self, *, tenants, projects, users, jobs, datasets, tokens_file, **options):
        rng = random.Random(7)
        User = get_user_model()
        password = make_password("bench-password")
        people = User.objects.bulk_create(
            [User(username=f"user{i:04d}", email=f"user{i:04d}@lab.example", password=password) for i in range(users)]
        )
        labs = Tenant.objects.bulk_create([Tenant(name=f"Lab {i:03d}", slug=f"lab-{i:03d}") for i in range(tenants)])
        # Every user belongs to one or two labs; the first member of a lab owns it.
        memberships, seen = [], set()
        for i, user in enumerate(people):
            for lab in {labs[i % tenants], labs[rng.randrange(tenants)]}:
                if (lab.pk, user.pk) in seen:
                    continue
                seen.add((lab.pk, user.pk))
                role = TenantRole.OWNER if i < tenants else rng.choice([TenantRole.MEMBER] * 4 + [TenantRole.ADMIN])
                memberships.append(Membership(tenant=lab, user=user, role=role))
        Membership.objects.bulk_create(memberships)
        members_of = {}
        for m in memberships:
            members_of.setdefault(m.tenant_id, []).append(m.user_id)

        boards = Project.objects.bulk_create(
            [Project(tenant=labs[i % tenants], name=f"Project {i:04d}", slug=f"p-{i:04d}") for i in range(projects)]
        )
        ProjectMember.objects.bulk_create(
            [
                ProjectMember(project=p, user_id=uid, role=ProjectRole.DEVELOPER)
                for p in boards
                for uid in members_of[p.tenant_id][:3]
            ],
            ignore_conflicts=True,
        )

        Job = apps.get_model("jobs", "Job")
        now = timezone.now()
        batch = []
        for i in range(jobs):
            project = boards[i % projects]
            state = rng.choice(STATES)
            created = now - timedelta(minutes=rng.randrange(60 * 24 * 90))
            batch.append(
                Job(
                    project=project, created_by_id=rng.choice(members_of[project.tenant_id]),
                    name=f"train-{i}", kind="train", command="python train.py",
                    parameters={"lr": round(rng.uniform(1e-4, 1e-1), 5), "epochs": rng.randrange(1, 50)},
                    gpus=rng.choice([2, 4, 8] if state == "queued" else [0, 1, 1, 2, 4, 8]), state=state,
                    state_reason="exited with code 0" if state == "succeeded" else "",
                    created_at=created, queued_at=created,
                    finished_at=created + timedelta(minutes=rng.randrange(1, 600)) if state in ("succeeded", "failed", "cancelled") else None,
                )
            )
            if len(batch) == 5000:
                Job.objects.bulk_create(batch)
                batch = []
        Job.objects.bulk_create(batch)

        if apps.is_installed("datasets") and datasets:
            Dataset = apps.get_model("datasets", "Dataset")
            Dataset.objects.bulk_create(
                [Dataset(project=boards[i % projects], name=f"Dataset {i}", slug=f"d-{i}") for i in range(datasets)],
                batch_size=5000,
            )

        if tokens_file:
            # One line per user: username, API token, session key, projects they develop in.
            from importlib import import_module

            from django.conf import settings
            from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY

            SessionStore = import_module(settings.SESSION_ENGINE).SessionStore

            developer_of = {}
            for row in ProjectMember.objects.values("user_id", "project_id"):
                developer_of.setdefault(row["user_id"], []).append(row["project_id"])
            rows = []
            with open(tokens_file, "w") as out:
                for user in people:
                    if user.pk not in developer_of:
                        continue
                    key = ApiToken.generate_key()
                    rows.append(ApiToken(user=user, name="bench", scope="write", key_prefix=key[:10], key_hash=ApiToken.hash_key(key)))
                    session = SessionStore()
                    session[SESSION_KEY] = str(user.pk)
                    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
                    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
                    session.create()
                    own = ",".join(str(p) for p in developer_of[user.pk][:20])
                    out.write(f"{user.username} {key} {session.session_key} {own}\n")
            ApiToken.objects.bulk_create(rows)
        self.stdout.write(f"Seeded {tenants} tenants, {projects} projects, {users} users, {jobs} jobs.")
