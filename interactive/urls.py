"""The way into a notebook from Gantry's origin, included by config/urls.py at the site root.

Notebooks themselves are served from an origin of their own (interactive/origin.py);
this view only checks `job.exec` and hands the browser a ticket for it (interactive/proxy.py).
"""

from django.urls import path

from interactive.proxy import notebook_open
from interactive.tensorboard import tensorboard_open

urlpatterns = [
    path("jobs/<int:pk>/notebook/", notebook_open, name="notebook_open"),
    path("jobs/<int:pk>/tensorboard/", tensorboard_open, name="tensorboard_open"),
]
