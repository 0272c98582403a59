"""WSGI entry point: pages and the API under gunicorn in production (`manage.py serve
--production`, platform/k8s/web.yaml)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()
