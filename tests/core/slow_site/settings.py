from config.settings import *  # noqa: F403

ROOT_URLCONF = "tests.core.slow_site.urls"
