"""Nodes and registered Kubernetes clusters (quotas live in scheduling)."""

from django.db import models
from django.utils import timezone


class KubernetesCluster(models.Model):
    """A Kubernetes cluster the `kubernetes` job backend may run jobs on.

    New jobs go to the default cluster; the cluster page lists the nodes of all of them.
    The kubeconfig is stored as plain text in the database (encryption at rest is not
    done here: protect the database, or use `in_cluster` and a service account).
    """

    name = models.SlugField(max_length=50, unique=True)
    in_cluster = models.BooleanField(
        default=False, help_text="Use the service account of the pod Gantry runs in."
    )
    kubeconfig = models.TextField(
        blank=True, help_text="A kubeconfig (YAML). Blank with in-cluster, or to use $KUBECONFIG."
    )
    context = models.CharField(
        max_length=200, blank=True, help_text="Kubeconfig context; blank = its current context."
    )
    namespace_prefix = models.CharField(
        max_length=20,
        default="gantry-",
        help_text="Each tenant's jobs run in the namespace <prefix><tenant slug>.",
    )
    is_default = models.BooleanField(default=False, help_text="New jobs run on this cluster.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)

    class Meta:
        ordering = ["-is_default", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_default"],
                condition=models.Q(is_default=True),
                name="kubernetescluster_one_default",
            )
        ]

    def __str__(self):
        return self.name

    def clean(self):
        from django.core.exceptions import ValidationError

        errors = {}
        if self.in_cluster and self.kubeconfig.strip():
            errors["kubeconfig"] = "Give a kubeconfig or choose in-cluster, not both."
        if self.kubeconfig.strip():
            import yaml

            try:
                data = yaml.safe_load(self.kubeconfig)
            except yaml.YAMLError as exc:
                errors["kubeconfig"] = f"Not valid YAML: {exc}"
            else:
                if not isinstance(data, dict) or not data.get("clusters"):
                    errors["kubeconfig"] = "Not a kubeconfig: it has no clusters."
                elif self.context and self.context not in {
                    c.get("name") for c in data.get("contexts") or [] if isinstance(c, dict)
                }:
                    errors["context"] = f"The kubeconfig has no context named {self.context!r}."
        prefix = self.namespace_prefix
        if prefix and not all(ch.islower() or ch.isdigit() or ch == "-" for ch in prefix):
            errors["namespace_prefix"] = "Lower-case letters, digits and - only."
        if errors:
            raise ValidationError(errors)


def registered_clusters() -> list[KubernetesCluster]:
    """Every registered cluster, the default first (jobs' Kubernetes backend asks:
    `core.registry.kubernetes_clusters`)."""
    return list(KubernetesCluster.objects.all())
