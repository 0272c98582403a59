"""What jobs asks of the apps above it, without importing them (jobs never imports
scheduling or cluster): Django signals whose receivers answer.

* `submit_check(project, spec, backend)`: sent before a job is queued. A receiver returns
  None, or (form field, message) when a job of this shape can never start (larger than
  every node or than the tenant's quota); the first answer refuses the submit.
* `tenant_limits(tenant)`: a receiver returns the tenant's hard limits as a dict
  (`gpus`, `cpus`, `memory_mb`; None = no limit), or None when the tenant has none. The
  Kubernetes backend turns them into the namespace's ResourceQuota.

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

Scheduling connects its receivers in `SchedulingConfig.ready`. Jobs tell scheduling that
the queue changed through a task name (`jobs.tasks.kick` queues
"scheduling.tasks.admit_and_launch"), not an import.
"""

from django.dispatch import Signal

submit_check = Signal()
tenant_limits = Signal()
job_transitioned = Signal()
job_alert = Signal()
metrics_reported = Signal()


def first_answer(signal: Signal, **kwargs):
    """The first receiver's answer that is not None, or None."""
    for _receiver, answer in signal.send(sender=None, **kwargs):
        if answer is not None:
            return answer
    return None
