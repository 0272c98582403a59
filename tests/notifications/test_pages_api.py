"""Managing subscriptions from the pages and the API: the secret is shown once, the
delivery log shows what failed, and nobody but the owner reaches a subscription."""

import pytest
from django.urls import reverse

from notifications import services
from notifications.models import Delivery, Subscription
from tests.notifications.conftest import RUN_TO_END
from tests.notifications.servers import Receiver

pytestmark = pytest.mark.django_db


def project_hook(owner, project, url="http://127.0.0.1:9/h"):
    return services.create_subscription(
        owner, project=project, name="team", channel="webhook", url=url, events=["job.failed"]
    )[0]


def test_a_maintainer_adds_a_webhook_and_sees_its_secret_once(owner, project, client_for):
    client = client_for(owner)
    url = reverse("notifications:project_subscriptions", args=[project.pk])
    response = client.post(
        url,
        {"name": "#ml", "channel": "webhook", "url": "https://hooks.example.org/x",
         "events": ["job.failed", "job.lost"]},
    )
    assert response.status_code == 200
    subscription = Subscription.objects.get()
    assert subscription.secret and subscription.secret in response.content.decode()
    assert subscription.events == ["job.failed", "job.lost"]
    assert subscription.project == project and subscription.user is None
    for page in (url, subscription.get_absolute_url()):
        assert subscription.secret not in client.get(page).content.decode()


def test_a_bad_address_is_refused_with_a_message_and_nothing_made(owner, project, client_for):
    response = client_for(owner).post(
        reverse("notifications:project_subscriptions", args=[project.pk]),
        {"name": "x", "channel": "webhook", "url": "", "events": ["job.failed"]},
    )
    assert response.status_code == 400 and "An http:// or https:// address." in response.content.decode()
    assert not Subscription.objects.exists()


def test_a_member_subscribes_to_their_own_jobs_by_email(member, client_for):
    response = client_for(member).post(
        reverse("notifications:my_subscriptions"),
        {"name": "me", "channel": "email", "email": "", "events": ["job.failed"]},
    )
    assert response.status_code == 200
    subscription = Subscription.objects.get()
    assert (subscription.user, subscription.email, subscription.project) == (
        member, "max@example.org", None
    )


def test_the_hook_page_shows_failing_deliveries(owner, project, job, queue, move, client_for):
    with Receiver(script=[500, 500, 500]) as receiver:
        subscription = project_hook(owner, project, receiver.url)
        move(job, *RUN_TO_END, "failed", reason="exit code 1")
        queue.run()
        from notifications.tasks import retry_due

        retry_due()
        retry_due()
    assert Delivery.objects.get().state == "failing"
    page = client_for(owner).get(subscription.get_absolute_url()).content.decode()
    assert "1 failing" in page and "HTTP 500" in page and "job.failed" in page
    listing = client_for(owner).get(
        reverse("notifications:project_subscriptions", args=[project.pk])
    ).content.decode()
    assert "1 failing" in listing


def test_outsiders_and_viewers_get_404_on_a_project_hook(
    owner, member, outsider, project, client_for, api_for
):
    subscription = project_hook(owner, project)
    for user in (outsider, member):  # member: a viewer of the project
        assert client_for(user).get(subscription.get_absolute_url()).status_code == 404
        api = api_for(user)
        assert api.get(f"/api/v1/notification-subscriptions/{subscription.pk}/").status_code == 404
        assert api.delete(f"/api/v1/notification-subscriptions/{subscription.pk}/").status_code == 404
        assert api.get("/api/v1/notification-subscriptions/").json()["results"] == []
    assert Subscription.objects.filter(pk=subscription.pk).exists()


def test_a_personal_subscription_is_its_owners_alone(owner, member, client_for, api_for):
    mine, _ = services.create_subscription(
        member, personal=True, name="me", channel="email", events=["job.failed"]
    )
    # Not even the tenant's owner reaches it.
    assert client_for(owner).get(mine.get_absolute_url()).status_code == 404
    assert api_for(owner).patch(
        f"/api/v1/notification-subscriptions/{mine.pk}/", {"name": "x"}, format="json"
    ).status_code == 404
    assert client_for(member).get(mine.get_absolute_url()).status_code == 200


def test_the_api_creates_lists_changes_and_deletes(owner, project, api_for):
    api = api_for(owner)
    created = api.post(
        "/api/v1/notification-subscriptions/",
        {"project": project.pk, "name": "ci", "channel": "slack",
         "url": "https://chat.example.org/hooks/abc", "events": ["job.succeeded"]},
        format="json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["secret"] == "" and body["channel"] == "slack"  # Slack hooks are not signed
    pk = body["id"]
    assert [row["id"] for row in api.get("/api/v1/notification-subscriptions/").json()["results"]] == [pk]
    changed = api.patch(
        f"/api/v1/notification-subscriptions/{pk}/", {"active": False, "events": ["job.lost"]},
        format="json",
    )
    assert changed.status_code == 200 and changed.json()["active"] is False
    assert Subscription.objects.get(pk=pk).events == ["job.lost"]
    assert api.get(f"/api/v1/notification-subscriptions/{pk}/deliveries/").json()["results"] == []
    assert api.delete(f"/api/v1/notification-subscriptions/{pk}/").status_code == 204
    assert not Subscription.objects.exists()


def test_the_api_refuses_a_project_subscription_from_a_viewer(member, project, api_for):
    response = api_for(member).post(
        "/api/v1/notification-subscriptions/",
        {"project": project.pk, "name": "x", "channel": "webhook",
         "url": "https://hooks.example.org/x", "events": ["job.failed"]},
        format="json",
    )
    assert response.status_code == 403 and not Subscription.objects.exists()


def test_a_test_message_is_sent_and_logged(owner, project, client_for):
    with Receiver() as receiver:
        subscription = project_hook(owner, project, receiver.url)
        response = client_for(owner).post(
            reverse("notifications:subscription_test", args=[subscription.pk])
        )
    assert response.status_code == 302
    assert receiver.bodies()[0]["event"] == "ping"
    assert Delivery.objects.get().state == "delivered"


def test_thresholds_are_kept_per_project(owner, project, client_for):
    response = client_for(owner).post(
        reverse("notifications:alert_settings", args=[project.pk]), {"waiting_minutes": "15"}
    )
    assert response.status_code == 302
    assert services.waiting_minutes_of(project) == 15
    bad = client_for(owner).post(
        reverse("notifications:alert_settings", args=[project.pk]), {"waiting_minutes": "0"}
    )
    assert bad.status_code == 400 and services.waiting_minutes_of(project) == 15


def test_the_list_pages_query_count_does_not_grow(
    owner, project, client_for, django_assert_max_num_queries
):
    for n in range(5):
        project_hook(owner, project)
        services.create_subscription(
            owner, personal=True, name=f"me {n}", channel="email", events=["job.failed"],
            project=project,
        )
    client = client_for(owner)
    with django_assert_max_num_queries(15):
        client.get(reverse("notifications:project_subscriptions", args=[project.pk]))
    with django_assert_max_num_queries(15):
        client.get(reverse("notifications:my_subscriptions"))
    with django_assert_max_num_queries(12):
        client.get("/api/v1/notification-subscriptions/")


def test_lab_administrators_change_subscriptions_in_the_admin_and_only_read_deliveries(
    make_user, owner, project, client_for
):
    admin_user = make_user("root", is_superuser=True, is_staff=True)
    subscription = project_hook(owner, project)
    client = client_for(admin_user)
    url = reverse("admin:notifications_subscription_change", args=[subscription.pk])
    response = client.post(
        url,
        {"name": "renamed", "url": subscription.url, "email": "", "events": '["job.lost"]',
         "active": "on"},
    )
    assert response.status_code == 302, response.content[:500]
    subscription.refresh_from_db()
    assert (subscription.name, subscription.events) == ("renamed", ["job.lost"])
    assert client.get(reverse("admin:notifications_delivery_changelist")).status_code == 200
    assert client.get(reverse("admin:notifications_delivery_add")).status_code == 403


def test_the_job_page_shows_what_was_sent_to_those_who_may_see_it(
    owner, member, project, job, queue, move, client_for
):
    with Receiver() as receiver:
        subscription = project_hook(owner, project, receiver.url)
        move(job, *RUN_TO_END, "failed", reason="exit code 1")
        queue.run()
    page = client_for(owner).get(job.get_absolute_url()).content.decode()
    assert subscription.get_absolute_url() in page and "Delivered" in page
    # A viewer sees the job, not the project's subscriptions.
    page = client_for(member).get(job.get_absolute_url()).content.decode()
    assert subscription.get_absolute_url() not in page and "Nothing sent of this job" in page
