"""The pure scheduling policy (no Django, no I/O, no clocks), split by concern.

- ``data``: nodes, quotas, jobs, the snapshot, the decision, ``PolicyConfig``.
- ``placement``: free capacity per node, best-fit gang placement.
- ``quotas``: the pass's usage per tenant, hard caps, why a job cannot run.
- ``entitlement``: each tenant's weighted max-min share of the demand, now and decayed
  over the past (what fair share weighs a tenant's usage against).
- ``ranking``: the order of one pass (priority, size-weighted submit time, fair share).
- ``messages``: wait reasons and ETAs in plain words.
- ``schedule_pass``: ``schedule`` (the Gantry policy: backfill, preemption; one
  ``SchedulePass`` whose steps are named for its rules) and ``schedule_fifo`` (the FIFO
  baseline); its docstring describes the whole policy.

Callers import the public names from ``scheduling`` (or from the module that defines them).
"""
