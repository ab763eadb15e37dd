"""A kubelet's HTTP readiness probe, for the two stand-ins that need one.

KWOK runs no probes. The kubelet stand-in probes a serving pod until it first
passes (then KWOK marks the pod Ready), and the gateway probes each endpoint
before it forwards (nothing marks a pod unready again when its server drains).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

Probe = Callable[[str, str], bool]
"""Whether ``http://ADDRESS/PATH`` passes a readiness probe."""
PROBE_TIMEOUT = 1.0


def http_probe(address: str, path: str) -> bool:
    """A kubelet's HTTP probe: any answer from 200 to 399 within ``PROBE_TIMEOUT``."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=PROBE_TIMEOUT) as answer:
            return 200 <= int(answer.status) < 400
    except (OSError, ValueError):
        return False


def readiness_path(pod: Mapping[str, Any]) -> str | None:
    """The HTTP path of the pod's first container readiness probe, if it has one."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        probe = (container.get("readinessProbe") or {}).get("httpGet")
        if probe:
            return str(probe.get("path") or "/")
    return None
