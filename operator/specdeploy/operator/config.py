"""Operator-wide settings and the clocks, which no spec holds.

Its own module because every layer reads them: the reactor passes a
``Config`` and a ``Clock`` down, the decision and the pool stages read the
``Config``. Kept beside, not inside, any stage so that no stage has to
import another to learn the profiler image or Prometheus' address.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

from specdeploy.operator.builders.job import DEFAULT_IMAGE
from specdeploy.operator.telemetry.settings import DEFAULT_SETTINGS, TelemetrySettings

Clock = Callable[[], str]
"""The wall clock a reconcile records in status (RFC 3339); injected so tests fix it."""


def utc_now() -> str:
    """RFC 3339 at second precision, as Kubernetes writes times."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Config:
    """Operator-wide settings that are not part of any spec."""

    profiler_image: str = DEFAULT_IMAGE
    prometheus_url: str | None = None
    """Where telemetry is read when a spec names no Prometheus (``SPECDEPLOY_PROMETHEUS_URL``)."""
    telemetry: TelemetrySettings = DEFAULT_SETTINGS


DEFAULT_CONFIG = Config()

__all__ = ["DEFAULT_CONFIG", "Clock", "Config", "utc_now"]
