"""Invitations (issue 27 item 10): a tenant admin invites by email with a role; the emailed
link creates the account or joins with the signed-in one, once; every bad link, and every
refusal, says why and changes nothing. Mail goes through Django's locmem backend
(mail.outbox), as the test settings set it."""

import re
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.urls import reverse
from django.utils import timezone

from accounts import invitations, services
from accounts.models import Invitation, Membership, TenantRole
from core.models import AuditEvent
from projects.models import ProjectMember

User = get_user_model()
PASSWORD = "a long enough passphrase 42"
pytestmark = pytest.mark.django_db


def emailed_path(message) -> str:
    """The accept link's path, as the invitee would click it."""
    match = re.search(r"https?://[^/\s]+(/invitations/accept/[^/\s]+/)", message.body)
    assert match, message.body
    return match.group(1)


@pytest.fixture
def invited(owner, tenant):
    """An invitation sent through the tenant page, and its emailed path."""
    return invite_on_page(owner, tenant, "new@example.org")


def invite_on_page(actor, tenant, email, **extra):
    from django.test import Client

    client = Client()
    client.force_login(actor)
    outbox = len(mail.outbox)
    response = client.post(
        reverse("accounts:invitation_add", args=[tenant.pk]),
        {"email": email, "role": "member", "days": "7", **extra},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert len(mail.outbox) == outbox + 1
    return emailed_path(mail.outbox[-1])


def snapshot():
    return (
        User.objects.count(),
        Membership.objects.count(),
        ProjectMember.objects.count(),
        list(Invitation.objects.values_list("pk", "accepted_at", "revoked_at")),
    )


# --- Sending ---------------------------------------------------------------------------


def test_an_admin_invites_by_email_and_the_link_goes_out(owner, tenant, client):
    path = invite_on_page(owner, tenant, "ada@example.org")
    message = mail.outbox[-1]
    assert message.to == ["ada@example.org"]
    assert "Lab A" in message.subject
    assert "member of Lab A" in message.body
    invitation = Invitation.objects.get()
    # Only a hash is kept: the secret in the link is nowhere in the row.
    secret = path.rstrip("/").rsplit("/", 1)[1]
    assert secret not in invitation.key_hash and len(secret) >= 40
    assert invitation.status == "pending" and invitation.invited_by == owner
    assert AuditEvent.objects.filter(action="invitation.create", tenant=tenant).exists()
    # Nothing is granted before acceptance.
    assert not User.objects.filter(email="ada@example.org").exists()
    client.force_login(owner)
    page = client.get(reverse("accounts:tenant_detail", args=[tenant.pk])).content.decode()
    assert "ada@example.org" in page and "Withdraw" in page


def test_the_link_uses_the_address_the_admin_is_on(owner, tenant, client):
    client.force_login(owner)
    client.post(
        reverse("accounts:invitation_add", args=[tenant.pk]),
        {"email": "ada@example.org", "role": "member", "days": "7"},
        HTTP_HOST="localhost",
    )
    assert "http://localhost/invitations/accept/" in mail.outbox[-1].body


def test_members_and_outsiders_cannot_invite(member, outsider, tenant, client):
    url = reverse("accounts:invitation_add", args=[tenant.pk])
    data = {"email": "x@example.org", "role": "member", "days": "7"}
    client.force_login(member)
    # Invitations are the admins' (invitation.view): to a member, as if there were none.
    assert client.get(url).status_code == 404
    assert client.post(url, data).status_code == 404
    assert (
        "Invite by email"
        not in client.get(reverse("accounts:tenant_detail", args=[tenant.pk])).content.decode()
    )
    client.force_login(outsider)
    assert client.post(url, data).status_code == 404
    assert not Invitation.objects.exists() and not mail.outbox


@pytest.mark.parametrize(
    "data,field,words",
    [
        ({"email": "not-an-address"}, "email", "Enter a valid email address"),
        ({"role": "owner"}, "role", "Select a valid choice"),
        ({"email": "max@example.org"}, "email", "already a member of Lab A"),
        ({"project_role": "developer"}, "project", "Pick the project"),
        ({"days": "400"}, "days", "Select a valid choice"),
    ],
)
def test_bad_invitations_are_refused_and_send_nothing(owner, tenant, client, data, field, words):
    client.force_login(owner)
    response = client.post(
        reverse("accounts:invitation_add", args=[tenant.pk]),
        {"email": "new@example.org", "role": "member", "days": "7", **data},
    )
    assert response.status_code == 400
    assert words in response.content.decode()
    assert not Invitation.objects.exists() and not mail.outbox


def test_a_second_pending_invitation_to_the_same_address_is_refused(owner, tenant, invited):
    with pytest.raises(Exception, match="pending invitation"):
        invitations.invite(actor=owner, tenant=tenant, email="NEW@example.org")
    assert Invitation.objects.count() == 1


def test_a_project_of_another_tenant_is_refused(owner, tenant, outsider, other_project):
    with pytest.raises(Exception, match="not a project of Lab A"):
        invitations.invite(
            actor=owner,
            tenant=tenant,
            email="new@example.org",
            project=other_project,
            project_role="developer",
        )
    assert not Invitation.objects.exists()


def test_a_mail_server_that_refuses_leaves_no_invitation(owner, tenant, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", 9  # nothing listens: refused
    with pytest.raises(Exception, match="could not be sent"):
        invitations.invite(actor=owner, tenant=tenant, email="new@example.org")
    assert not Invitation.objects.exists()
    assert not AuditEvent.objects.filter(action="invitation.create").exists()


# --- Accepting -------------------------------------------------------------------------


def test_accepting_creates_the_account_and_grants_the_roles_once(owner, tenant, project, client):
    path = invite_on_page(
        owner,
        tenant,
        "ada@example.org",
        role="admin",
        project=project.pk,
        project_role="developer",
    )
    page = client.get(path)
    assert page.status_code == 200
    assert "Create your account" in page.content.decode()
    response = client.post(path, {"username": "ada", "password1": PASSWORD, "password2": PASSWORD})
    assert response.status_code == 302
    assert response.url == reverse("accounts:tenant_detail", args=[tenant.pk])
    ada = User.objects.get(username="ada")
    assert ada.email == "ada@example.org" and ada.check_password(PASSWORD)
    assert Membership.objects.get(tenant=tenant, user=ada).role == TenantRole.ADMIN
    assert ProjectMember.objects.get(project=project, user=ada).role == "developer"
    # Signed in, on the tenant's page.
    assert client.get(response.url).status_code == 200
    invitation = Invitation.objects.get()
    assert invitation.status == "accepted" and invitation.accepted_by == ada
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"invitation.accept", "membership.add", "projectmember.add", "user.create"} <= actions
    # Used: the link now refuses, for anyone.
    client.logout()
    before = snapshot()
    again = client.post(path, {"username": "ada2", "password1": PASSWORD, "password2": PASSWORD})
    assert again.status_code == 410 and "already used" in again.content.decode()
    assert snapshot() == before


def test_a_signed_in_user_joins_with_their_account(owner, tenant, outsider, client):
    invited = invite_on_page(owner, tenant, "Oscar@Example.org")  # any letter case
    client.force_login(outsider)
    page = client.get(invited).content.decode()
    assert "Accept as oscar" in page
    response = client.post(invited)
    assert response.status_code == 302
    assert Membership.objects.get(tenant=tenant, user=outsider).role == TenantRole.MEMBER
    assert User.objects.filter(email__iexact="oscar@example.org").count() == 1  # linked
    event = AuditEvent.objects.get(action="invitation.accept")
    assert event.details["account"] == "linked"


def test_an_account_of_another_address_cannot_accept(tenant, outsider, invited, client):
    """A forwarded or leaked link: signed in as someone else, the page says whose it is and
    the account is not let in."""
    client.force_login(outsider)
    before = snapshot()
    page = client.get(invited)
    assert page.status_code == 403
    text = page.content.decode()
    assert "This invitation is for new@example.org" in text
    assert "signed in as oscar (oscar@example.org)" in text and "Sign out" in text
    assert "Accept as" not in text
    response = client.post(invited)
    assert response.status_code == 403
    assert "This invitation is for new@example.org" in response.content.decode()
    assert snapshot() == before
    assert not Membership.objects.filter(tenant=tenant, user=outsider).exists()
    # The invitee can still use it.
    client.logout()
    signup = {"username": "newbie", "password1": PASSWORD, "password2": PASSWORD}
    assert client.post(invited, signup).status_code == 302
    assert Membership.objects.get(tenant=tenant, user__username="newbie")


def test_with_console_mail_the_inviter_sees_the_link_to_hand_over(owner, tenant, client, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
    client.force_login(owner)
    response = client.post(
        reverse("accounts:invitation_add", args=[tenant.pk]),
        {"email": "ada@example.org", "role": "member", "days": "7"},
        follow=True,
    )
    page = response.content.decode()
    link = re.search(r'id="new-invitation-link" value="(https?://[^"]+)"', page)
    assert link, page
    assert "not to ada@example.org" in page
    assert invitations.find_invitation(link.group(1).rstrip("/").rsplit("/", 1)[1]).email == (
        "ada@example.org"
    )
    again = client.get(reverse("accounts:tenant_detail", args=[tenant.pk])).content.decode()
    assert "new-invitation-link" not in again  # shown once


def test_with_real_mail_the_link_is_not_shown(owner, tenant, client):
    client.force_login(owner)
    response = client.post(
        reverse("accounts:invitation_add", args=[tenant.pk]),
        {"email": "ada@example.org", "role": "member", "days": "7"},
        follow=True,
    )
    assert "Sent an invitation to ada@example.org" in response.content.decode()
    assert "new-invitation-link" not in response.content.decode()


def test_a_single_sign_on_account_is_linked_too(owner, tenant, invited, client):
    sso_user = User.objects.create(username="grace", email="NEW@example.org", oidc_subject="kc-123")
    sso_user.set_unusable_password()
    sso_user.save()
    client.force_login(sso_user)
    assert client.post(invited).status_code == 302
    assert Membership.objects.filter(tenant=tenant, user=sso_user).exists()
    assert User.objects.get(pk=sso_user.pk).oidc_subject == "kc-123"


def test_someone_already_in_the_tenant_is_told_so(member, tenant, invited, client):
    client.force_login(member)
    before = snapshot()
    response = client.post(invited)
    assert response.status_code == 400
    assert "already a member of Lab A" in response.content.decode()
    assert snapshot() == before


@pytest.mark.parametrize(
    "data,words",
    [
        ({"username": "max"}, "is taken"),
        ({"username": "MAX"}, "is taken"),
        ({"username": "bad name!"}, "Enter a valid username"),
        ({"password1": "short", "password2": "short"}, "too short"),
        ({"password1": "12345678901234", "password2": "12345678901234"}, "entirely numeric"),
        ({"password2": "something else"}, "The two passwords differ"),
    ],
)
def test_bad_accounts_are_refused_and_change_nothing(tenant, invited, client, data, words):
    before = snapshot()
    response = client.post(
        invited, {"username": "ada", "password1": PASSWORD, "password2": PASSWORD, **data}
    )
    assert response.status_code == 400
    assert words in response.content.decode()
    assert snapshot() == before
    assert "_auth_user_id" not in client.session


def test_a_tampered_link_is_refused(invited, client):
    before = snapshot()
    tampered = invited[:-3] + ("A" if invited[-3] != "A" else "B") + invited[-2:]
    for path in (tampered, reverse("accounts:invitation_accept", args=["nonsense"])):
        page = client.get(path)
        assert page.status_code == 404 and "not valid" in page.content.decode()
        post = client.post(path, {"username": "ada", "password1": PASSWORD, "password2": PASSWORD})
        assert post.status_code == 404
    assert snapshot() == before


def test_an_expired_link_is_refused(invited, client):
    Invitation.objects.update(expires_at=timezone.now() - timedelta(minutes=1))
    before = snapshot()
    page = client.get(invited)
    assert page.status_code == 410 and "expired" in page.content.decode()
    post = client.post(invited, {"username": "ada", "password1": PASSWORD, "password2": PASSWORD})
    assert post.status_code == 410
    assert snapshot() == before


def test_a_withdrawn_link_is_refused(owner, tenant, invited, client):
    client.force_login(owner)
    invitation = Invitation.objects.get()
    response = client.post(reverse("accounts:invitation_revoke", args=[invitation.pk]))
    assert response.status_code == 302
    assert Invitation.objects.get().status == "revoked"
    assert AuditEvent.objects.filter(action="invitation.revoke").exists()
    page = client.get(response.url).content.decode()
    assert "No pending invitations" in page and ">Withdraw<" not in page
    client.logout()
    before = snapshot()
    post = client.post(invited, {"username": "ada", "password1": PASSWORD, "password2": PASSWORD})
    assert post.status_code == 410 and "withdrawn" in post.content.decode()
    assert snapshot() == before


def test_only_admins_withdraw_and_outsiders_get_404(member, outsider, invited, client):
    invitation = Invitation.objects.get()
    url = reverse("accounts:invitation_revoke", args=[invitation.pk])
    client.force_login(member)
    assert client.post(url).status_code == 404  # members do not see invitations
    client.force_login(outsider)
    assert client.post(url).status_code == 404
    assert Invitation.objects.get().status == "pending"


def test_an_accepted_invitation_cannot_be_withdrawn(owner, tenant, outsider):
    invited = invite_on_page(owner, tenant, outsider.email)
    invitation = Invitation.objects.get()
    invitations.accept_invitation(key=invited.rstrip("/").rsplit("/", 1)[1], user=outsider)
    with pytest.raises(Exception, match="already accepted"):
        invitations.revoke_invitation(actor=owner, invitation=invitation)


def test_an_inviter_who_lost_the_admin_role_invites_no_one(owner, tenant, make_user, client):
    admin = make_user("adele")
    services.TENANT_MEMBERS.add(actor=owner, place=tenant, user=admin, role=TenantRole.ADMIN)
    path = invite_on_page(admin, tenant, "ada@example.org")
    membership = Membership.objects.get(tenant=tenant, user=admin)
    services.TENANT_MEMBERS.change_role(actor=owner, member=membership, role=TenantRole.MEMBER)
    before = snapshot()
    response = client.post(path, {"username": "ada", "password1": PASSWORD, "password2": PASSWORD})
    assert response.status_code == 410
    assert "can no longer add members" in response.content.decode()
    assert snapshot() == before


# --- API -------------------------------------------------------------------------------


def test_the_api_invites_lists_and_withdraws(owner, tenant, project, api_for):
    api = api_for(owner)
    response = api.post(
        "/api/v1/invitations/",
        {
            "tenant": tenant.pk,
            "email": "ada@example.org",
            "role": "admin",
            "project": project.pk,
            "project_role": "viewer",
            "days": 3,
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "pending" and body["invited_by"] == "olivia"
    assert "key" not in body and "key_hash" not in body
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["ada@example.org"]
    rows = api.get("/api/v1/invitations/").json()["results"]
    assert [row["email"] for row in rows] == ["ada@example.org"]
    assert api.delete(f"/api/v1/invitations/{body['id']}/").status_code == 204
    assert Invitation.objects.get().status == "revoked"


def test_the_api_refuses_members_outsiders_and_bad_input(owner, member, outsider, tenant, api_for):
    data = {"tenant": tenant.pk, "email": "ada@example.org", "role": "member"}
    assert api_for(member).post("/api/v1/invitations/", data, format="json").status_code == 404
    # Another tenant's id answers as one that does not exist.
    refused = api_for(outsider).post("/api/v1/invitations/", data, format="json")
    assert refused.status_code == 400 and "tenant" in refused.json()
    bad = api_for(owner).post(
        "/api/v1/invitations/", {**data, "email": "nope", "role": "owner"}, format="json"
    )
    assert bad.status_code == 400 and {"email", "role"} <= set(bad.json())
    assert not Invitation.objects.exists() and not mail.outbox
    invitations.invite(actor=owner, tenant=tenant, email="ada@example.org")
    pk = Invitation.objects.get().pk
    for user in (member, outsider):
        api = api_for(user)
        assert api.get("/api/v1/invitations/").json()["results"] == []
        assert api.get(f"/api/v1/invitations/{pk}/").status_code == 404
        assert api.delete(f"/api/v1/invitations/{pk}/").status_code == 404
    assert Invitation.objects.get().status == "pending"


def test_a_lab_administrator_withdraws_invitations_in_the_admin(make_user, invited, client):
    root = make_user("root", is_staff=True, is_superuser=True)
    client.force_login(root)
    changelist = reverse("admin:accounts_invitation_changelist")
    assert "new@example.org" in client.get(changelist).content.decode()
    invitation = Invitation.objects.get()
    response = client.post(changelist, {"action": "withdraw", "_selected_action": [invitation.pk]})
    assert response.status_code == 302
    assert Invitation.objects.get().status == "revoked"
    assert AuditEvent.objects.get(action="invitation.revoke").actor == root
    assert client.get(reverse("admin:accounts_invitation_add")).status_code == 403


def test_signed_out_the_link_offers_sign_in_and_single_sign_on_back_to_it(
    invited, client, settings
):
    settings.OIDC_OP_ISSUER = "https://sso.example.org/realms/lab"
    settings.OIDC_RP_CLIENT_ID, settings.OIDC_RP_CLIENT_SECRET = "gantry", "secret"
    settings.OIDC_PROVIDER_NAME = "Keycloak"
    page = client.get(invited).content.decode()
    back = quote(invited, safe="")
    assert f"/accounts/login/?next={back}" in page
    assert f"/oidc/authenticate/?next={back}" in page
    assert "Sign in with Keycloak to accept" in page
