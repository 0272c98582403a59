from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "cluster"
    verbose_name = "Cluster"

    def ready(self):
        from cluster.models import registered_clusters
        from core import registry

        # Jobs' Kubernetes backend runs on the registered clusters; jobs never imports cluster.
        registry.kubernetes_clusters.register(registered_clusters)
