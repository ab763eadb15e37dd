"""Prometheus in the local cluster: its config, and the file-SD targets the stand-in writes.

A real cluster finds vLLM pods with ``kubernetes_sd`` (a PodMonitor). Here
that would find nothing reachable: KWOK gives pods fake IPs (10.244.x), and
the kubelet stand-in runs each serving pod as a local process on mapped
127.0.0.1 ports. So Prometheus discovers targets from files instead
(``file_sd_configs``): the stand-in writes one JSON file per pod under
``<workdir>/prometheus/targets/`` with the pod's loopback addresses and the
labels a PodMonitor would have given it, and removes the file when the pod
goes. Prometheus re-reads the directory every ``REFRESH_INTERVAL``.

Label contract (what dashboards, alerts and the adapter rules may rely on).
Every serving pod gets two target groups:

* ``job="vllm"``: the vLLM API port, path ``/metrics``;
* ``job="specdeploy-addon"``: the add-on's own metrics port, path ``/metrics``;

each with ``namespace``, ``pod``, ``specdeploy_deployment`` (the pod's
``specdeploy.io/deployment`` label), ``specdeploy_pool`` (``specdeploy.io/pool``)
and, when the pod has them, ``specdeploy_profile`` (``specdeploy.io/profile``) and
``specdeploy_plain_reference`` (``specdeploy.io/plain-reference``, the live floor's plain
reference replica).
``pod_target_groups`` builds exactly these. In a real cluster the chart's
PodMonitor gives the same labels (prometheus-operator adds ``namespace`` and
``pod`` itself; a relabelling whose source label is empty drops the target
label, so ``specdeploy_profile`` is absent when the pod has none):

.. code-block:: yaml

    apiVersion: monitoring.coreos.com/v1
    kind: PodMonitor
    metadata:
      name: specdeploy
    spec:
      selector:
        matchExpressions:
          - {key: specdeploy.io/deployment, operator: Exists}
      podMetricsEndpoints:
        - port: http          # vLLM's API port
          path: /metrics
          relabelings: &labels
            - {targetLabel: job, replacement: vllm}
            - sourceLabels: [__meta_kubernetes_pod_label_specdeploy_io_deployment]
              targetLabel: specdeploy_deployment
            - sourceLabels: [__meta_kubernetes_pod_label_specdeploy_io_pool]
              targetLabel: specdeploy_pool
            - sourceLabels: [__meta_kubernetes_pod_label_specdeploy_io_profile]
              targetLabel: specdeploy_profile
            - sourceLabels: [__meta_kubernetes_pod_label_specdeploy_io_plain_reference]
              targetLabel: specdeploy_plain_reference
        - port: metrics       # the add-on's metrics port
          path: /metrics
          relabelings:        # the same three, with job specdeploy-addon
            - {targetLabel: job, replacement: specdeploy-addon}
            - ...

The operator, started by the harness, gets one group, ``job="specdeploy-operator"``
(``operator_target_groups``, file ``specdeploy-operator.json``), written
when it starts and removed when it is stopped.

(The ``job`` relabelling comes after prometheus-operator's own, which would
set ``<namespace>/<podmonitor>``.) A group's ``job`` label overrides the
scrape config's ``job_name`` in Prometheus, so one file-SD scrape job carries
both jobs here.

The scrape interval is short for a local cluster (``DEFAULT_SCRAPE_INTERVAL``)
so tests see a new series in seconds; ``SPECDEPLOY_PROMETHEUS_SCRAPE_INTERVAL``
(a Prometheus duration such as ``5s``) overrides it.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.localcluster.layout import Layout

SCRAPE_INTERVAL_ENV = "SPECDEPLOY_PROMETHEUS_SCRAPE_INTERVAL"
DEFAULT_SCRAPE_INTERVAL = "2s"
REFRESH_INTERVAL = "1s"
PODS_JOB = "specdeploy-pods"
"""The file-SD scrape config; its targets carry ``job`` themselves (VLLM_JOB, ADDON_JOB)."""
SELF_JOB = "prometheus"
VLLM_JOB = "vllm"
ADDON_JOB = "specdeploy-addon"
OPERATOR_JOB = "specdeploy-operator"
OPERATOR_TARGETS = "specdeploy-operator"
"""The operator's target file (no pod's: those are ``<namespace>_<pod>``, with an underscore)."""

# Pod label -> target label. The keys mirror the operator's builders/common.py
# (the harness does not import the operator; a harness test checks they agree).
POD_LABELS = {
    "specdeploy.io/deployment": "specdeploy_deployment",
    "specdeploy.io/pool": "specdeploy_pool",
    "specdeploy.io/profile": "specdeploy_profile",
    "specdeploy.io/plain-reference": "specdeploy_plain_reference",
}
REQUIRED_POD_LABELS = ("specdeploy.io/deployment", "specdeploy.io/pool")

_DURATION = re.compile(r"^(?:\d+(?:ms|s|m|h|d|w|y))+$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_TARGET = re.compile(r"^[^\s/:]+:\d{1,5}$")


class TargetError(ValueError):
    """A target group or file name that Prometheus would reject or misread."""


class ScrapeIntervalError(ValueError):
    """``SPECDEPLOY_PROMETHEUS_SCRAPE_INTERVAL`` is not a positive Prometheus duration."""


@dataclass(frozen=True)
class TargetGroup:
    """One file-SD group: ``host:port`` targets that share ``labels`` (both copied)."""

    targets: Sequence[str]
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # A bare string is a sequence too: of one-character "targets".
        if isinstance(self.targets, str):
            raise TargetError(f"targets must be a sequence of host:port, not {self.targets!r}")
        object.__setattr__(self, "targets", tuple(self.targets))
        object.__setattr__(self, "labels", dict(self.labels))
        for target in self.targets:
            if not _TARGET.match(target) or not 0 < int(target.rsplit(":", 1)[1]) < 65536:
                raise TargetError(f"target {target!r} is not host:port")
        for name in self.labels:
            if not _LABEL_NAME.match(name):
                raise TargetError(f"label name {name!r} is not a Prometheus label name")

    def document(self) -> dict[str, Any]:
        """The group as file SD reads it."""
        return {"targets": list(self.targets), "labels": dict(self.labels)}


# ---- the label contract ------------------------------------------------------


def pod_labels(namespace: str, pod: str, labels: Mapping[str, str]) -> dict[str, str]:
    """The target labels of one serving pod (without ``job``); see the module docstring."""
    missing = [key for key in REQUIRED_POD_LABELS if not labels.get(key)]
    if missing:
        raise TargetError(f"pod {namespace}/{pod} lacks the label(s) {missing}")
    out = {"namespace": namespace, "pod": pod}
    out.update({target: labels[key] for key, target in POD_LABELS.items() if labels.get(key)})
    return out


def pod_target_groups(
    namespace: str, pod: str, labels: Mapping[str, str], *, api: str, addon: str
) -> list[TargetGroup]:
    """The two groups of a serving pod: vLLM's API port and the add-on's metrics port."""
    common = pod_labels(namespace, pod, labels)
    return [
        TargetGroup((api,), {"job": VLLM_JOB, **common}),
        TargetGroup((addon,), {"job": ADDON_JOB, **common}),
    ]


def operator_target_groups(address: str) -> list[TargetGroup]:
    """The operator's ``/metrics`` (``--metrics-port``): job ``specdeploy-operator``.

    Only ``job``: Prometheus sets ``instance`` to the address. In a real
    cluster the chart's PodMonitor (or ServiceMonitor) for the operator's
    ``metrics`` port relabels ``job`` the same way.
    """
    return [TargetGroup((address,), {"job": OPERATOR_JOB})]


# ---- the targets directory ---------------------------------------------------


def targets_dir(layout: Layout) -> Path:
    """Where the stand-in writes target files for the cluster in ``layout``."""
    return layout.prometheus / "targets"


def _target_file(directory: Path, name: str) -> Path:
    if not _FILE_NAME.match(name):
        raise TargetError(f"target file name {name!r}: use letters, digits, '.', '_', '-'")
    return directory / f"{name}.json"


def write_targets(targets_dir: Path, name: str, groups: Sequence[TargetGroup]) -> Path:
    """Write ``<targets_dir>/<name>.json`` atomically; return its path.

    The JSON goes to a hidden temporary file (which the ``*.json`` pattern
    does not match) and is renamed over the old file, so Prometheus reads
    either the old list or the new one, never half a file.
    """
    path = _target_file(targets_dir, name)
    body = json.dumps([g.document() for g in groups], indent=2) + "\n"
    targets_dir.mkdir(parents=True, exist_ok=True)
    tmp = targets_dir / f".{name}.json.tmp-{os.getpid()}"
    try:
        with tmp.open("w") as out:
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def remove_targets(targets_dir: Path, name: str) -> bool:
    """Remove ``<name>.json`` (Prometheus drops its targets); False if there was none."""
    path = _target_file(targets_dir, name)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


# ---- the server's configuration ----------------------------------------------


def scrape_interval(environ: Mapping[str, str] = os.environ) -> str:
    """``SPECDEPLOY_PROMETHEUS_SCRAPE_INTERVAL`` if set (validated), else the default."""
    value = environ.get(SCRAPE_INTERVAL_ENV, "").strip() or DEFAULT_SCRAPE_INTERVAL
    if not _DURATION.match(value) or not any(c in "123456789" for c in value):
        raise ScrapeIntervalError(
            f"{SCRAPE_INTERVAL_ENV}={value!r} is not a positive duration like 2s, 1m"
        )
    return value


def render_config(*, targets: Path, self_address: str, interval: str) -> dict[str, Any]:
    """prometheus.yml: itself, and every ``*.json`` file in ``targets``."""
    return {
        "global": {
            "scrape_interval": interval,
            # Prometheus rejects a timeout longer than the interval.
            "scrape_timeout": interval,
            "evaluation_interval": interval,
        },
        "scrape_configs": [
            {"job_name": SELF_JOB, "static_configs": [{"targets": [self_address]}]},
            {
                "job_name": PODS_JOB,
                # Emulated pods may answer without a Content-Type, which
                # Prometheus 3 refuses unless a fallback is named.
                "fallback_scrape_protocol": "PrometheusText0.0.4",
                "file_sd_configs": [
                    {"files": [str(targets / "*.json")], "refresh_interval": REFRESH_INTERVAL}
                ],
            },
        ],
    }


def write_config(path: Path, config: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))


# ---- reading it back (tests and benchmarks) -----------------------------------


def api_get(base: str, path: str, timeout: float = 10, **params: str) -> Any:
    """``data`` of one Prometheus HTTP API answer (``/api/v1/...``); raises on a failure."""
    url = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=timeout) as response:
        reply = json.load(response)
    if reply.get("status") != "success":
        raise RuntimeError(f"{url}: {reply}")
    return reply["data"]


def instant_query(base: str, promql: str) -> list[dict[str, Any]]:
    """The series of an instant query."""
    return list(api_get(base, "/api/v1/query", query=promql)["result"])
