"""Seed the public catalog: PyTorch, TensorFlow and (legacy) MXNet, from images/catalog.py."""

from django.db import migrations


def seed(apps, schema_editor):
    from images.catalog import CATALOG
    from images.reference import parse_reference

    RuntimeImage = apps.get_model("images", "RuntimeImage")
    for entry in CATALOG:
        ref = parse_reference(entry["reference"])
        RuntimeImage.objects.get_or_create(
            tenant=None,
            name=entry["name"],
            defaults={
                **{k: v for k, v in entry.items() if k != "name"},
                "visibility": "public",
                "registry": ref.registry,
                "repository": ref.repository,
                "tag": ref.tag,
                "digest": ref.digest,
            },
        )


def unseed(apps, schema_editor):
    from images.catalog import CATALOG

    RuntimeImage = apps.get_model("images", "RuntimeImage")
    RuntimeImage.objects.filter(tenant=None, name__in=[e["name"] for e in CATALOG]).delete()


class Migration(migrations.Migration):
    dependencies = [("images", "0001_initial")]
    operations = [migrations.RunPython(seed, unseed)]
