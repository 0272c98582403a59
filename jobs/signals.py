"""What jobs tells the apps above it after the fact, without importing them: Django
signals any app may hear. (What jobs asks of those apps — could a job ever start, a
tenant's limits — is declared in `core.registry`, not answered by signals.)

* `job_transitioned(job, event)`: sent after the transaction that moved a job to a new
  state commits (`jobs.states.transition`); `event` is the JobEvent (from_state,
  to_state, reason). Receivers must not block: queue a task for slow work
  (notifications deliver by django-q tasks).
* `job_alert(job, kind, message)`: something a person should hear of that is not a state
  change: kind is one of `idle_warning` (a GPU job or notebook about to be stopped for
  idleness), `waiting_long` (queued longer than its project's threshold; message is the
  "why pending" text), `quota_nearly_full`, `checkpoint_saved`.
* `metrics_reported(job, names)`: sent after a batch of new metric points commits; `names`
  is the set of metric names in it. Sweeps listen (a trial's objective feeds the pruner).

Receivers connect in their app's `AppConfig.ready` (notifications, sweeps).
"""

from django.dispatch import Signal

job_transitioned = Signal()
job_alert = Signal()
metrics_reported = Signal()
