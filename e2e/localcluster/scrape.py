"""One metric family read off a process's own ``/metrics`` (no Prometheus in between).

Tests that count the system's own ticks (the operator's telemetry intervals,
its leader gauge) read them here, at the moment they ask, rather than
waiting for a scrape.
"""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def family_total(address: str, family: str) -> float:
    """The sum of ``family``'s samples at ``http://address/metrics`` (``_created`` left out)."""
    url = f"http://{address}/metrics"
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    for found in text_string_to_metric_families(text):
        if found.name == family:
            return sum(s.value for s in found.samples if not s.name.endswith("_created"))
    raise AssertionError(f"{family} is not on {url}")
