"""The minute's telemetry pass (core.schedules: `telemetry.tick`, every minute)."""

from __future__ import annotations

import logging

from django.utils import timezone

from telemetry import dcgm, services

logger = logging.getLogger(__name__)


def tick() -> dict:
    """Scrape the DCGM exporters (when configured), sum the latest GPU samples per job
    and day, then apply the idle policies."""
    now = timezone.now()
    outcome = {"dcgm_points": dcgm.scrape(now=now)}
    outcome["days"] = services.refresh_usage(now)
    outcome.update(services.check_idle(now))
    if outcome["warned"] or outcome["stopped"]:
        logger.info("idle GPUs: %s", outcome)
    return outcome
