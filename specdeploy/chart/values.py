"""The chart's values, typed: the one place that says what ``values.yaml`` may hold.

``values.schema.json`` is generated from ``ChartValues`` (``schema``), so Helm
refuses a misspelt key or a wrong type at ``helm install`` time instead of the
template rendering something the API server or the operator rejects later.
Every model forbids unknown keys for that reason. ``values.yaml`` is written by
hand, for its comments, and a unit test holds it equal to ``ChartValues()``'s
defaults. Free-form Kubernetes fragments (resources, affinity, tolerations)
stay objects: the API server validates those.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from specdeploy.operator.config import DEFAULT_FLOOR
from specdeploy.operator.naming import OPERATOR_LEASE

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""A namespace name (RFC 1123 label, at most 63 characters)."""
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
"""A Lease name (RFC 1123 subdomain)."""
DURATION = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
"""A Prometheus duration as the Prometheus Operator's CRDs accept it (``30s``, ``1m``)."""
DEFAULT_IMAGE_REPOSITORY = "specdeploy-operator"
"""What ``images/operator.Dockerfile``'s build line tags (``specdeploy-operator:<version>``)."""


class _Values(BaseModel):
    """camelCase keys as Helm charts use them; unknown keys are refused."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


class Image(_Values):
    repository: str = Field(DEFAULT_IMAGE_REPOSITORY, min_length=1)
    tag: str = Field("", description="empty: the chart's appVersion (the package version)")
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"


class ServiceAccount(_Values):
    create: bool = True
    name: str = Field("", description="empty: the release's full name")
    annotations: dict[str, str] = Field(default_factory=dict)


class Rbac(_Values):
    create: bool = Field(
        True, description="the operator's ClusterRole (or Roles) and bindings, generated"
    )


class LeaderElection(_Values):
    """``specdeploy operator run --leader-elect*`` (operator/reactor/leader.py)."""

    enabled: bool = True
    id: str = Field(OPERATOR_LEASE, pattern=DNS_SUBDOMAIN, max_length=253)
    namespace: str = Field(
        "",
        description="the Lease's namespace; empty: the release namespace, or in the "
        "namespaced mode the first of watchNamespaces (its Role grants the Lease)",
    )
    lease_duration: int = Field(15, ge=1, description="seconds a standby waits on a leader")
    renew_deadline: float = Field(10.0, gt=0, description="seconds a leader may fail to renew")
    retry_period: float = Field(2.0, gt=0, description="seconds between renewals and tries")


class Floor(_Values):
    """The live floor's timings (``--floor-*``): what a restart of a serving pod costs here."""

    restart_seconds: float = Field(
        DEFAULT_FLOOR.restart_seconds,
        gt=0,
        description="one serving replica's restart, model load to Ready: a pool goes to "
        "plain decoding once its losing streak has lasted this long over the loss",
    )
    probe_after_seconds: float = Field(
        DEFAULT_FLOOR.probe_after_seconds,
        gt=0,
        description="plain decoding this long without a canary window (no spare GPU for "
        "it), then speculate again to measure",
    )


class Operator(_Values):
    """The rest of ``specdeploy operator run``'s flags."""

    log_level: Literal["debug", "info", "warning"] = "info"
    resync_seconds: float = Field(300.0, gt=0)
    profiler_image: str = Field("", description="empty: the operator's built-in default")
    prometheus_url: str = Field(
        "",
        alias="prometheusURL",
        description="SPECDEPLOY_PROMETHEUS_URL: telemetry's Prometheus when a spec names none",
    )
    metrics_port: int = Field(9401, ge=1, le=65535)
    health_port: int = Field(8080, ge=1, le=65535, description="kopf's liveness endpoint")
    floor: Floor = Field(default_factory=Floor)
    extra_args: list[str] = Field(default_factory=list)


Quantities = dict[str, str | int]


def _requests() -> Quantities:
    return {"cpu": "100m", "memory": "256Mi"}


def _limits() -> Quantities:
    return {"memory": "512Mi"}


class Resources(_Values):
    """The operator container's; one kopf process, idle most of the time."""

    requests: Quantities = Field(default_factory=_requests)
    limits: Quantities = Field(default_factory=_limits)


class Monitor(_Values):
    enabled: bool = True
    interval: str = Field("30s", pattern=DURATION)
    labels: dict[str, str] = Field(
        default_factory=dict, description="e.g. the release label a Prometheus selects on"
    )


class Rule(_Values):
    enabled: bool = True
    labels: dict[str, str] = Field(default_factory=dict)


class Monitoring(_Values):
    """Prometheus Operator objects: rendered only when its CRDs are served, and enabled."""

    service_monitor: Monitor = Field(default_factory=Monitor)
    pod_monitor: Monitor = Field(default_factory=lambda: Monitor(interval="15s"))
    prometheus_rule: Rule = Field(default_factory=Rule)


class Dashboards(_Values):
    """One ConfigMap per ``dashboards/*.json``, for Grafana's dashboard sidecar."""

    enabled: bool = True
    label: str = Field("grafana_dashboard", min_length=1)
    label_value: str = "1"
    annotations: dict[str, str] = Field(default_factory=dict)


class CrdUpgrade(_Values):
    """The pre-install/pre-upgrade Job that applies ``crds/`` (Helm never upgrades them)."""

    enabled: bool = True
    backoff_limit: int = Field(2, ge=0)
    active_deadline_seconds: int = Field(300, ge=1)


class ChartValues(_Values):
    """Everything ``values.yaml`` may set."""

    image: Image = Field(default_factory=Image)
    image_pull_secrets: list[dict[str, str]] = Field(default_factory=list)
    name_override: str = ""
    fullname_override: str = ""
    replica_count: int = Field(1, ge=0, description="more than 1 needs leaderElection.enabled")
    watch_namespaces: list[str] = Field(
        default_factory=list,
        description="empty: the whole cluster; else the namespaced mode (a Role per namespace)",
        json_schema_extra={
            "items": {"type": "string", "pattern": DNS_LABEL, "maxLength": 63},
            "uniqueItems": True,
        },
    )
    service_account: ServiceAccount = Field(default_factory=ServiceAccount)
    rbac: Rbac = Field(default_factory=Rbac)
    leader_election: LeaderElection = Field(default_factory=LeaderElection)
    operator: Operator = Field(default_factory=Operator)
    resources: Resources = Field(default_factory=Resources)
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    pod_labels: dict[str, str] = Field(default_factory=dict)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    affinity: dict[str, Any] = Field(default_factory=dict)
    priority_class_name: str = ""
    crd_upgrade: CrdUpgrade = Field(default_factory=CrdUpgrade)
    monitoring: Monitoring = Field(default_factory=Monitoring)
    dashboards: Dashboards = Field(default_factory=Dashboards)
    global_: dict[str, Any] = Field(
        default_factory=dict,
        alias="global",
        description="Helm's global values (set by a parent chart; unused here)",
    )


def schema() -> dict[str, Any]:
    """``values.schema.json``: JSON Schema 2020-12 (what Helm 3.22 validates) of the values.

    Pydantic's titles are its field names re-cased ("Backofflimit"); the keys and
    descriptions say more, so the titles go.
    """
    body = _untitled(ChartValues.model_json_schema(by_alias=True, mode="validation"))
    return {"$schema": SCHEMA_DIALECT, **body}


def _untitled(node: Any) -> Any:
    if isinstance(node, dict):
        # "properties" maps field names to schemas: a field may be called "title".
        return {
            k: (_untitled_map(v) if k in ("properties", "$defs") else _untitled(v))
            for k, v in node.items()
            if k != "title"
        }
    if isinstance(node, list):
        return [_untitled(v) for v in node]
    return node


def _untitled_map(node: dict[str, Any]) -> dict[str, Any]:
    return {name: _untitled(child) for name, child in node.items()}


def defaults() -> dict[str, Any]:
    """The values a bare ``helm install`` uses, as ``values.yaml`` must hold them."""
    return ChartValues().model_dump(mode="json", by_alias=True)
