from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth import views as auth_views
from django.contrib.auth.mixins import LoginRequiredMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views import View

from accounts import invitations, services
from accounts.filters import ApiTokenFilterSet, TenantFilterSet
from accounts.forms import (
    ApiTokenForm,
    DefaultProjectForm,
    InvitationForm,
    InvitationSignUpForm,
    MemberAddForm,
    MemberRoleForm,
    TenantForm,
)
from accounts.members import MemberService
from accounts.models import ApiToken, Invitation, Tenant
from core.views import (
    GantryView,
    ObjectDeleteView,
    ObjectDetailView,
    ObjectListView,
    ServiceFormView,
    apply_service_errors,
)

CONSOLE_EMAIL = "django.core.mail.backends.console.EmailBackend"


class TenantListView(ObjectListView):
    model = Tenant
    permission_action = "tenant.view"
    filterset_class = TenantFilterSet
    template_name = "accounts/tenant_list.html"

    def get_queryset(self):
        return (
            super()
            .get_queryset()
            .annotate(
                project_count=Count("projects", distinct=True),
                member_count=Count("memberships", distinct=True),
            )
            .order_by("name")
        )


class TenantDetailView(ObjectDetailView):
    model = Tenant
    permission_action = "tenant.view"
    template_name = "accounts/tenant_detail.html"

    def get_extra_context(self, tenant):
        return {
            "projects": tenant.projects.visible_to(self.request.user),
            "memberships": tenant.memberships.select_related("user"),
            "add_member_form": MemberAddForm(),
            "invitations": Invitation.objects.visible_to(self.request.user)
            .filter(tenant=tenant)
            .pending()
            .select_related("invited_by", "project"),
            "invitation_link": self.request.session.pop("invitation_link", None),
        }


class TenantCreateView(LoginRequiredMixin, View):
    """Any signed-in user may start a tenant and becomes its owner."""

    permission_action = "authenticated"

    def get(self, request):
        return render(
            request,
            "core/form.html",
            {"form": TenantForm(), "title": "New tenant", "submit_label": "Create tenant"},
        )

    def post(self, request):
        form = TenantForm(data=request.POST)
        if form.is_valid():
            try:
                tenant = services.create_tenant(actor=request.user, **form.cleaned_data)
            except ValidationError as exc:
                apply_service_errors(form, exc)
            else:
                request.session["tenant_id"] = tenant.pk
                messages.success(request, f"Created {tenant}. You are its owner.")
                return redirect(tenant)
        return render(
            request,
            "core/form.html",
            {"form": form, "title": "New tenant", "submit_label": "Create tenant"},
            status=400,
        )


class TenantEditView(ServiceFormView):
    model = Tenant
    permission_action = "tenant.change"
    form_class = TenantForm
    title = "Edit tenant"
    success_message = "Saved {object}."

    def get_form_kwargs(self, target):
        return {"instance": target, "initial": {}}

    def perform(self, form, target):
        return services.update_tenant(actor=self.request.user, tenant=target, **form.cleaned_data)


class TenantDeleteView(ObjectDeleteView):
    model = Tenant
    permission_action = "tenant.delete"

    def get_contents(self, tenant):
        return [("projects", tenant.projects.count()), ("members", tenant.memberships.count())]

    def perform(self, tenant):
        services.delete_tenant(actor=self.request.user, tenant=tenant)

    def get_success_url(self, tenant):
        return reverse("accounts:tenant_list")


class MemberPage:
    """The member pages of every place (a tenant, a project). `members`, the kind's
    accounts.members.MemberService, gives a page its permission (`<kind>.manage`) and its
    model: the member row, or the place for pages that add to it (`on_place`)."""

    members: MemberService
    on_place = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "members" in cls.__dict__:
            model = cls.members.model
            cls.permission_action = cls.members.manage
            cls.model = (
                model._meta.get_field(model.place_field).related_model if cls.on_place else model
            )


class AddMemberView(MemberPage, ServiceFormView):
    on_place = True
    title = "Add a member"
    submit_label = "Add member"
    success_message = "Added {object.user} as {object.role}."

    def perform(self, form, place):
        return self.members.add(actor=self.request.user, place=place, **form.cleaned_data)


class ChangeMemberRoleView(MemberPage, ServiceFormView):
    title = "Change role"
    success_message = "{object.user} is now {object.role}."

    def get_form_kwargs(self, member):
        return {"initial": {"role": member.role}}

    def perform(self, form, member):
        return self.members.change_role(
            actor=self.request.user, member=member, role=form.cleaned_data["role"]
        )


class RemoveMemberView(MemberPage, ObjectDeleteView):
    def perform(self, member):
        self.members.remove(actor=self.request.user, member=member)

    def get_success_url(self, member):
        return member.get_absolute_url()  # the place's members


class MemberAddView(AddMemberView):
    form_class = MemberAddForm
    members = services.TENANT_MEMBERS


class MemberEditView(ChangeMemberRoleView):
    form_class = MemberRoleForm
    members = services.TENANT_MEMBERS


class MemberRemoveView(RemoveMemberView):
    members = services.TENANT_MEMBERS


class ApiTokenListView(ObjectListView):
    """Settings: the user's personal API tokens, and a form to make one."""

    model = ApiToken
    permission_action = "authenticated"
    filterset_class = ApiTokenFilterSet
    template_name = "accounts/token_list.html"
    throttle_scope = "token_create"

    def get_queryset(self):
        return super().get_queryset().select_related("project__tenant")

    def get_extra_context(self):
        return {
            "form": ApiTokenForm(user=self.request.user),
            "default_project_form": DefaultProjectForm(user=self.request.user),
        }

    def post(self, request):
        form = ApiTokenForm(data=request.POST, user=request.user)
        new_key, status = None, 400
        if not self._throttle_allows(request):
            form.add_error(None, "Too many new tokens in a short time. Try again later.")
            status = 429
        elif form.is_valid():
            try:
                token, new_key = services.create_api_token(
                    actor=request.user,
                    name=form.cleaned_data["name"],
                    scope=form.cleaned_data["scope"],
                    project=form.cleaned_data["project"],
                    expires_at=form.expires_at(),
                )
            except ValidationError as exc:
                apply_service_errors(form, exc)
            else:
                form = ApiTokenForm(user=request.user)
        tokens = ApiToken.objects.visible_to(request.user).select_related("project__tenant")
        return render(
            request,
            self.template_name,
            {
                "form": form,
                "objects": tokens,
                "new_key": new_key,
                "default_project_form": DefaultProjectForm(user=request.user),
            },
            status=200 if new_key else status,
        )

    def _throttle_allows(self, request) -> bool:
        # The API's throttle (DEFAULT_THROTTLE_RATES["token_create"]), keyed by user:
        # the page and the API share one budget.
        from rest_framework.throttling import ScopedRateThrottle

        return ScopedRateThrottle().allow_request(request, self)


class ApiTokenRevokeView(GantryView):
    model = ApiToken
    permission_action = "authenticated"
    http_method_names = ["post"]

    def post(self, request, pk):
        token = get_object_or_404(ApiToken.objects.visible_to(request.user), pk=pk)
        services.revoke_api_token(actor=request.user, token=token)
        messages.success(request, f"Revoked {token.name}. It stops working immediately.")
        return redirect("accounts:token_list")


class DefaultProjectView(GantryView):
    """Settings: the project a bare MLflow experiment or model name means."""

    permission_action = "authenticated"
    http_method_names = ["post"]

    def post(self, request):
        form = DefaultProjectForm(data=request.POST, user=request.user)
        if not form.is_valid():  # the settings page again, the choice marked as refused
            tokens = ApiToken.objects.visible_to(request.user).select_related("project__tenant")
            context = {"form": ApiTokenForm(user=request.user), "objects": tokens,
                       "default_project_form": form}
            return render(request, ApiTokenListView.template_name, context, status=400)
        project = form.cleaned_data["default_project"]
        services.set_default_project(actor=request.user, project=project)
        messages.success(
            request,
            f"Bare MLflow names now mean {project}." if project else "No default project.",
        )
        return redirect("accounts:token_list")


class SwitchTenantView(LoginRequiredMixin, View):
    """The tenant switcher in the navigation bar."""

    permission_action = "authenticated"
    http_method_names = ["post"]

    def post(self, request):
        tenant_id = request.POST.get("tenant")
        if tenant_id:
            if not (tenant_id.isascii() and tenant_id.isdigit()):
                raise Http404("No such tenant.")
            tenant = get_object_or_404(Tenant.objects.visible_to(request.user), pk=tenant_id)
            request.session["tenant_id"] = tenant.pk
        else:
            request.session.pop("tenant_id", None)
        next_url = request.POST.get("next", "")
        # A path on this site only: redirect() would read anything else as a view name.
        if not next_url.startswith("/") or not url_has_allowed_host_and_scheme(
            next_url, {request.get_host()}, request.is_secure()
        ):
            next_url = reverse("home")
        return redirect(next_url)


class GantryLoginView(auth_views.LoginView):
    """Local sign-in (locked out after repeated failures: accounts/lockout.py), offering
    single sign-on when on."""

    def get_context_data(self, **kwargs):
        from accounts.oidc import login_button_context

        return {**super().get_context_data(**kwargs), **login_button_context(self.request)}


class InvitationCreateView(ServiceFormView):
    """A tenant admin invites someone by email address (accounts.invitations)."""

    model = Tenant
    permission_action = "invitation.manage"
    form_class = InvitationForm
    title = "Invite someone"
    submit_label = "Send invitation"
    success_message = "Sent an invitation to {object.email}."

    def get_form_kwargs(self, tenant):
        return {"tenant": tenant, "user": self.request.user}

    def perform(self, form, tenant):
        data = form.cleaned_data
        invitation = invitations.invite(
            actor=self.request.user,
            tenant=tenant,
            email=data["email"],
            role=data["role"],
            project=data["project"],
            project_role=data["project_role"],
            days=data["days"],
            base_url=self.request.build_absolute_uri("/"),
        )
        if settings.EMAIL_BACKEND == CONSOLE_EMAIL:
            # Mail only reaches the server's log here (`make run`): the tenant page shows
            # the inviter the link to hand over, once.
            self.request.session["invitation_link"] = [invitation.email, invitation.accept_url]
        return invitation


class InvitationRevokeView(GantryView):
    model = Invitation
    permission_action = "invitation.manage"
    http_method_names = ["post"]

    def post(self, request, pk):
        invitation = self.get_object()
        try:
            invitations.revoke_invitation(actor=request.user, invitation=invitation)
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
        else:
            messages.success(request, f"Withdrew the invitation of {invitation.email}.")
        return redirect(invitation.get_absolute_url())


class InvitationAcceptView(View):
    """The emailed link: anyone holding it may open it (the secret is the credential).
    Signed out, it creates an account; signed in (a local or single sign-on account), it
    joins with that account. A link that cannot be accepted says why, and changes nothing."""

    template_name = "accounts/invitation_accept.html"

    def _page(self, request, key, invitation, form=None, status=200):
        from accounts.oidc import login_button_context

        here = request.path
        context = {
            "invitation": invitation,
            "form": form or InvitationSignUpForm(),
            "login_url": reverse("login") + "?" + urlencode({"next": here}),
        }
        if not request.user.is_authenticated:
            request_with_next = _WithNext(request, here)
            context.update(login_button_context(request_with_next))
        return render(request, self.template_name, context, status=status)

    def _refused(self, request, error):
        return render(
            request,
            "accounts/invitation_invalid.html",
            {"message": error.message, "wrong_account": error.status == 403},
            status=error.status,
        )

    def get(self, request, key):
        try:
            invitation = invitations.find_invitation(key)
            if request.user.is_authenticated:
                invitations.check_account(invitation, request.user)
        except invitations.InvitationError as error:
            return self._refused(request, error)
        return self._page(request, key, invitation)

    def post(self, request, key):
        form = None
        try:
            if request.user.is_authenticated:
                invitation, user = invitations.accept_invitation(key=key, user=request.user)
            else:
                form = InvitationSignUpForm(data=request.POST)
                if not form.is_valid():
                    return self._page(request, key, invitations.find_invitation(key), form, 400)
                invitation, user = invitations.accept_invitation(
                    key=key,
                    username=form.cleaned_data["username"],
                    password=form.cleaned_data["password1"],
                )
                login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        except invitations.InvitationError as error:
            return self._refused(request, error)
        except (ValidationError, PermissionDenied) as exc:
            try:
                invitation = invitations.find_invitation(key)
            except invitations.InvitationError as error:
                return self._refused(request, error)
            form = form or InvitationSignUpForm()
            if isinstance(exc, ValidationError):
                apply_service_errors(form, exc)
            else:
                form.add_error(None, str(exc) or "You may not accept this invitation.")
            return self._page(request, key, invitation, form, status=400)
        request.session["tenant_id"] = invitation.tenant_id
        messages.success(
            request,
            f"Welcome to {invitation.tenant}, {user.username}: you are its {invitation.role}.",
        )
        return redirect(invitation.tenant)


class _WithNext:
    """A request whose `next` is the invitation page (for the single sign-on button)."""

    def __init__(self, request, next_url):
        self.GET = {"next": next_url}
        self.POST = {}
