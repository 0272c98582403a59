"""Gantry settings: every value comes from the environment, with embedded defaults.

With no variables set Gantry runs on one machine with no outside services
(SQLite, files under ./var, django-q's ORM broker, an in-process channel layer).
`DATABASE_URL`, `REDIS_URL`, `GANTRY_STORAGE=s3` and `OIDC_*` move it onto
PostgreSQL, Redis, Ceph and Keycloak.  A malformed value stops start-up with a
message naming the variable (`config.settings.env`).

The settings are read in three parts; `gantry` and `signin` build on `base` only:
`base` (Django and its libraries: apps, database, Redis, files, the API, security,
logging), `signin` (accounts, single sign-on, lockout, email) and `gantry` (jobs,
runtime images, the Kubernetes backend, datasets).
"""

from config.settings.base import *  # noqa: F403
from config.settings.gantry import *  # noqa: F403
from config.settings.signin import *  # noqa: F403
