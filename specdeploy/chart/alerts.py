"""The chart's alerts, as typed data in one place, rendered into a plain Prometheus rules file.

Why code and not a hand-written YAML file: every expression is built from the
metric names and the label contract the rest of the project defines (the
add-on's ``vllm_addon/metrics.py``, the operator's ``operator/reactor/metrics.py``,
the scrape labels of ``e2e/localcluster/prometheus.py``: ``job``
``specdeploy-addon`` / ``specdeploy-operator``, ``namespace``,
``specdeploy_deployment``, ``specdeploy_pool``), the thresholds are named
constants, and the committed file is output, checked by a unit test
(``specdeploy chart generate --check``; without ``--check`` it regenerates it).
``promtool test rules`` (tests/alerts) runs each alert firing and not firing.

The file is a rules file (``groups:``), so ``promtool check rules`` reads it
as it is and the chart's PrometheusRule embeds it as its ``spec``. Its
annotations hold Prometheus templates (``{{ $labels.specdeploy_pool }}``):
the chart must embed it with ``.Files.Get``, never through ``tpl``.

Which signals, and why:

* *Slower than plain decoding*: ``specdeploy_predicted_gain_over_vanilla``.
  A speculating pod never runs plain decoding (K=0 with speculation configured
  costs more than plain decoding), so no observed plain-decoding speed exists;
  the gain is the policy's, from live acceptance and live step-time
  corrections priced against the profile's plain-decoding baseline. The
  observed acceptance length and step times are exported, but without an
  observed baseline they cannot say "slower than plain".
* *Acceptance collapse*: observed (live accepted / reached at position 1,
  the a_1 the tables use) against ``specdeploy_acceptance_profile``, the
  profile's a_1 for the table in force.
* *Table reload errors*: ``specdeploy_table_reload_errors_total`` (exported at
  0 from the start, so the first rejected file is an increase).
* *Telemetry stale*: the operator's last cycle's timestamp against
  ``specdeploy_operator_telemetry_interval_seconds``, on the acting (leader)
  operator only.
* *Profiling failed*: ``specdeploy_operator_profiling_failed``, one series per
  failed pool.
* *Operator down*: no ``up{job="specdeploy-operator"}`` equal to 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import yaml

__all__ = ["ALERTS", "RULES_FILE", "Alert", "Severity", "files", "render"]

RULES_FILE = "rules/specdeploy-alerts.yaml"
"""Where the rules live, relative to charts/specdeploy."""
GROUP = "specdeploy"

ADDON = 'job="specdeploy-addon"'
OPERATOR = 'job="specdeploy-operator"'
POOL = "namespace, specdeploy_deployment, specdeploy_pool"
"""A pool's identity in the pods' scrape labels."""
OPERATOR_POOL = "specdeploy_namespace, specdeploy_deployment, specdeploy_pool"
"""The same in the operator's own series (its ``namespace`` is the operator's)."""
WHERE = "{{ $labels.namespace }}/{{ $labels.specdeploy_deployment }}"
OPERATOR_WHERE = "{{ $labels.specdeploy_namespace }}/{{ $labels.specdeploy_deployment }}"

SLOWER_FOR = "10m"
"""How long a pool must be predicted slower than plain decoding (the issue's 10 minutes)."""
COLLAPSE_RATIO = 0.5
"""Live a_1 below this share of the profile's is a collapse, not drift."""
COLLAPSE_WINDOW = "10m"
COLLAPSE_MIN_REACHED_PER_SECOND = 0.1
"""Sequence-steps reaching position 1 per second (60 in the window) before judging."""
STALE_INTERVALS = 3
"""Telemetry intervals without a completed cycle before the loop counts as stalled."""
RELOAD_WINDOW = "10m"


class Severity(StrEnum):
    WARNING = "warning"
    CRITICAL = "critical"


@dataclass(frozen=True)
class Alert:
    """One alerting rule: what a platform team sees, and what to do about it."""

    name: str
    expr: str
    for_: str
    severity: Severity
    summary: str
    description: str
    runbook: str
    """What to look at first; appended to the description."""

    def rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity.value},
            "annotations": {
                "summary": self.summary,
                "description": f"{self.description} Runbook: {self.runbook}",
            },
        }


def _by(labels: str, expr: str, op: str = "sum") -> str:
    return f"{op} by ({labels}) (\n  {expr}\n)"


def _rate(metric: str, selector: str, window: str) -> str:
    return f"rate({metric}{{{selector}}}[{window}])"


def _slower_than_plain() -> Alert:
    return Alert(
        name="SpecdeploySpeculationSlowerThanPlain",
        expr=(f"avg by ({POOL}) (\n  specdeploy_predicted_gain_over_vanilla{{{ADDON}}}\n) < 1"),
        for_=SLOWER_FOR,
        severity=Severity.WARNING,
        summary=f"Speculation is slower than plain decoding in pool "
        f"{{{{ $labels.specdeploy_pool }}}} of {WHERE}",
        description=(
            f'For {SLOWER_FOR} the pool\'s add-on has predicted {{{{ $value | printf "%.2f" }}}}x '
            "plain decoding's goodput for the K in force (live acceptance and step times "
            "against the profile's plain-decoding baseline)."
        ),
        runbook=(
            "`kubectl -n {{ $labels.namespace }} describe sdep "
            "{{ $labels.specdeploy_deployment }}`: the SpeculationBeneficial condition and the "
            "pool's predictedGain say whether the operator judged it too; if the traffic changed, "
            "re-profile (spec.profiling.mode: always) or set spec.speculation.policy: off."
        ),
    )


def _acceptance_collapse() -> Alert:
    position_1 = f'{ADDON}, position="1"'
    accepted = _by(POOL, _rate("specdeploy_accepted_tokens_total", position_1, COLLAPSE_WINDOW))
    reached = _by(
        POOL, _rate("specdeploy_draft_positions_reached_total", position_1, COLLAPSE_WINDOW)
    )
    profile = _by(POOL, f"specdeploy_acceptance_profile{{{position_1}}}", "avg")
    # A pod that has accepted nothing since it started has no accepted series:
    # "or 0 * reached" makes a total collapse 0 rather than no answer.
    enough = f"(\n{reached}\n> {COLLAPSE_MIN_REACHED_PER_SECOND})"
    live = f"(\n{accepted}\nor\n0 * {reached}\n)\n/\n{enough}"
    return Alert(
        name="SpecdeployAcceptanceCollapse",
        expr=f"(\n{live}\n)\n< {COLLAPSE_RATIO} * {profile}",
        for_="10m",
        severity=Severity.WARNING,
        summary=f"Draft acceptance collapsed in pool {{{{ $labels.specdeploy_pool }}}} of {WHERE}",
        description=(
            f"Live acceptance at draft position 1 over {COLLAPSE_WINDOW} is "
            '{{ $value | printf "%.2f" }}, below '
            f"{COLLAPSE_RATIO:g} times the profile's for the table in force: the traffic is not "
            "what the profile measured, or the drafter does not match the model."
        ),
        runbook=(
            "compare live and profiled acceptance per position on the per-pool dashboard; "
            "check spec.speculation.draftModel against spec.model; re-profile on the new "
            "traffic (spec.profiling.mode: always)."
        ),
    )


def _table_reload_errors() -> Alert:
    errors = f"increase(specdeploy_table_reload_errors_total{{{ADDON}}}[{RELOAD_WINDOW}])"
    return Alert(
        name="SpecdeployTableReloadErrors",
        expr=f"{_by(POOL, errors)} > 0",
        for_="5m",
        severity=Severity.WARNING,
        summary=f"K table files rejected in pool {{{{ $labels.specdeploy_pool }}}} of {WHERE}",
        description=(
            f"The pool's add-on rejected table files in the last {RELOAD_WINDOW}; its pods keep "
            "the last good table, so the operator's new tables are not taking effect."
        ),
        runbook=(
            "the reason is in the pods' log (`kubectl logs`, lines 'specdeploy: table "
            "rejected'); then the pool's table ConfigMap and the operator's log."
        ),
    )


def _telemetry_stale() -> Alert:
    age = f"time() - specdeploy_operator_telemetry_last_cycle_timestamp_seconds{{{OPERATOR}}}"
    interval = f"specdeploy_operator_telemetry_interval_seconds{{{OPERATOR}}}"
    return Alert(
        name="SpecdeployTelemetryStale",
        expr=(
            f"(\n  {age}\n)\n> {STALE_INTERVALS} * ({interval} > 0)\n"
            f"and\nspecdeploy_operator_leader{{{OPERATOR}}} == 1"
        ),
        for_="5m",
        severity=Severity.WARNING,
        summary="The specdeploy operator's telemetry loop has stalled",
        description=(
            "The acting operator has not completed a telemetry cycle for "
            "{{ $value | humanizeDuration }}, more than "
            f"{STALE_INTERVALS} telemetry intervals: K tables follow neither load nor "
            "acceptance, and no pool is re-profiled on drift."
        ),
        runbook=(
            "the operator's log (lines 'telemetry'), its TelemetryHealthy condition on each "
            "SpeculativeDeployment, and specdeploy_operator_promql_query_failures_total "
            "(Prometheus unreachable or refusing)."
        ),
    )


def _profiling_failed() -> Alert:
    failed = f"specdeploy_operator_profiling_failed{{{OPERATOR}}}"
    return Alert(
        name="SpecdeployProfilingFailed",
        expr=f"max by ({OPERATOR_POOL}) (\n  {failed}\n) > 0",
        for_="1m",
        severity=Severity.WARNING,
        summary=f"Profiling failed for pool {{{{ $labels.specdeploy_pool }}}} of {OPERATOR_WHERE}",
        description=(
            "The pool's profiling Job failed (deterministically, or after its retries): the "
            "pool has no K table of its own, and its previous Deployment, if any, serves "
            "unchanged."
        ),
        runbook=(
            "`kubectl -n {{ $labels.specdeploy_namespace }} describe sdep "
            "{{ $labels.specdeploy_deployment }}` (the Profiled condition names the Job and "
            "why), then the Job's pod log; delete the Job to profile again."
        ),
    )


def _operator_down() -> Alert:
    return Alert(
        name="SpecdeployOperatorDown",
        expr=f"absent(up{{{OPERATOR}}} == 1)",
        for_="5m",
        severity=Severity.CRITICAL,
        summary="No specdeploy operator is up",
        description=(
            "Prometheus has scraped no specdeploy operator successfully for 5 minutes (no "
            "target, or every target down): SpeculativeDeployments are not reconciled and "
            "K tables no longer follow telemetry (the pods keep serving their last table)."
        ),
        runbook=(
            "the operator's pods in its namespace (`kubectl get pods`, their events and log); "
            "if they run, check that the chart's ServiceMonitor selects them."
        ),
    )


ALERTS: tuple[Alert, ...] = (
    _slower_than_plain(),
    _acceptance_collapse(),
    _table_reload_errors(),
    _telemetry_stale(),
    _profiling_failed(),
    _operator_down(),
)

HEADER = (
    "# Generated by `specdeploy chart generate` from specdeploy/chart/alerts.py;\n"
    "# do not edit (a unit test fails when this file is stale).\n"
)


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (PromQL reads as written), without touching PyYAML's."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def document(alerts: Sequence[Alert] = ALERTS) -> dict[str, Any]:
    """The rules file as data: one group, the alerts in order."""
    return {"groups": [{"name": GROUP, "rules": [a.rule() for a in alerts]}]}


def render(alerts: Sequence[Alert] = ALERTS) -> str:
    body = yaml.dump(document(alerts), Dumper=_Dumper, sort_keys=False, width=1 << 16)
    return HEADER + body


def files() -> dict[str, str]:
    """The chart's files this module owns, by path relative to charts/specdeploy."""
    return {RULES_FILE: render()}
