"""Sign-in lockout (django-axes, accounts/lockout.py) on every door that takes a password:
five failures for one username from one address lock that pair out, whichever door
they came through, with a 429, and each refusal is in the audit log."""

from django.test import Client
from django.urls import reverse

from core.models import AuditEvent

LOGIN = "/accounts/login/"
ADMIN_LOGIN = "/admin/login/"


def sign_in(client, password, door=LOGIN, username="olivia"):
    data = {"username": username, "password": password}
    if door == ADMIN_LOGIN:
        data["next"] = "/admin/"
    return client.post(door, data)


def signed_in(client) -> bool:
    return "_auth_user_id" in client.session


def test_five_failed_sign_ins_lock_out_that_username_from_that_address(client, owner, settings):
    assert settings.GANTRY_LOGIN_MAX_FAILURES == 5
    for _ in range(4):
        assert sign_in(client, "wrong").status_code == 200  # "enter a correct username"
    assert sign_in(client, "wrong").status_code == 429  # the fifth locks the pair out

    refused = sign_in(client, "pw-olivia")
    assert refused.status_code == 429
    assert "Too many failed sign-in attempts. Try again in 15 minutes." in refused.content.decode()
    assert not signed_in(client)
    assert AuditEvent.objects.filter(
        action="auth.login_locked_out", details__username="olivia", details__door=LOGIN
    ).exists()

    # Another address is not locked out; the same name in other case or spacing is.
    assert sign_in(Client(REMOTE_ADDR="10.0.0.9"), "pw-olivia").status_code == 302
    assert sign_in(client, "pw-olivia", username=" Olivia").status_code == 429


def test_the_admin_door_refuses_twelve_wrong_passwords_and_then_the_right_one(
    client, owner, settings
):
    owner.is_staff = owner.is_superuser = True
    owner.save()
    statuses = [sign_in(client, f"wrong-{n}", door=ADMIN_LOGIN).status_code for n in range(12)]
    assert statuses[:4] == [200] * 4 and set(statuses[4:]) == {429}

    refused = sign_in(client, "pw-olivia", door=ADMIN_LOGIN)
    assert refused.status_code == 429
    assert not signed_in(client)
    assert client.get("/admin/").status_code == 302  # to the admin's sign-in
    assert AuditEvent.objects.filter(
        action="auth.login_locked_out", details__door=ADMIN_LOGIN
    ).exists()


def test_locked_out_on_the_sign_in_page_is_locked_out_of_the_admin(client, owner):
    owner.is_staff = owner.is_superuser = True
    owner.save()
    for _ in range(5):
        sign_in(client, "wrong")
    assert sign_in(client, "pw-olivia", door=ADMIN_LOGIN).status_code == 429
    assert not signed_in(client)


def test_a_successful_sign_in_resets_the_failure_count(client, owner):
    for _ in range(4):
        sign_in(client, "wrong")
    assert sign_in(client, "pw-olivia").status_code == 302
    client.logout()
    for _ in range(4):
        assert sign_in(client, "wrong").status_code == 200
    assert sign_in(client, "pw-olivia").status_code == 302


def test_behind_the_proxy_each_client_address_counts_apart(client, owner, settings):
    """In production the proxy appends the client's address to X-Forwarded-For; one
    client locked out does not lock out the others behind the same proxy, and a client
    cannot escape by writing its own X-Forwarded-For."""
    settings.GANTRY_TRUSTED_PROXIES = 1
    attacker = Client(HTTP_X_FORWARDED_FOR="203.0.113.7")
    for n in range(5):
        # What the client wrote itself comes first; the proxy's entry is the last.
        attacker.defaults["HTTP_X_FORWARDED_FOR"] = f"198.51.100.{n}, 203.0.113.7"
        sign_in(attacker, "wrong")
    assert sign_in(attacker, "pw-olivia").status_code == 429

    colleague = Client(HTTP_X_FORWARDED_FOR="203.0.113.8")
    assert sign_in(colleague, "pw-olivia").status_code == 302


def test_the_sign_in_page_still_signs_in(client, owner):
    response = sign_in(client, "pw-olivia")
    assert response.status_code == 302 and response["Location"] == reverse("home")
    assert signed_in(client)
