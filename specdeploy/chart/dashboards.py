"""The chart's Grafana dashboards, as code: a fleet overview and a per-pool board.

Why code: a dashboard is the operator's user interface for speculative
decoding (is K following load, is acceptance what the profile said, is
speculation beating plain decoding), and a JSON export drifts from the
metrics it reads. Here each panel is a small typed value whose PromQL comes
from ``dashboard_queries`` (which names only series that exist), built with
grafana-foundation-sdk (the Grafana 12 build, schemaVersion 41), and written
into ``charts/specdeploy/dashboards/``; the chart renders each file into a
ConfigMap labelled for Grafana's sidecar. ``specdeploy chart generate``
writes it (``--check`` fails when the committed JSON is stale).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.common import (
    GraphThresholdsStyleConfig,
    ReduceDataOptions,
    StackingConfig,
    VizLegendOptions,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as dm

from specdeploy.chart import dashboard_queries as q

FLEET_FILE = "dashboards/specdeploy-fleet.json"
POOL_FILE = "dashboards/specdeploy-pool.json"
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
VARIABLE_METRIC = "specdeploy_steps_total"
"""The series the template variables list labels from: every add-on exports it."""

Kind = Literal["timeseries", "bars", "share", "stat", "table"]


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str
    dashed: bool = False
    """Drawn dashed: a reference (the profile's, the prediction) beside what is live."""


@dataclass(frozen=True)
class PanelSpec:
    """One panel: what it shows, how, and the queries behind it."""

    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]
    kind: Kind = "timeseries"
    width: int = 12
    height: int = 8
    extra: dict[str, float] = field(default_factory=dict)
    """``min``/``max`` of the axis, when the quantity has natural bounds."""
    thresholds: tuple[tuple[float | None, str], ...] = ()
    """(from value, colour) steps, the first from -inf (None): a stat takes its colour from
    them, a time series draws them as lines and shaded areas."""


def t(expr: str, legend: str, *, dashed: bool = False) -> Target:
    return Target(expr, legend, dashed)


DASHED = [dm.DynamicConfigValue("custom.lineStyle", {"fill": "dash", "dash": [10, 10]})]
LOSS_BELOW_ONE = ((None, "red"), (1.0, "green"))
"""Against plain decoding: red where speculation loses (below 1.0x), green where it wins."""


POOL_LEGEND = "{{specdeploy_deployment}}/{{specdeploy_pool}}"


def _target(i: int, target: Target, instant: bool) -> prometheus.Dataquery:
    query = prometheus.Dataquery().expr(target.expr).legend_format(target.legend)
    query = query.ref_id(chr(ord("A") + i)).datasource(DATASOURCE)
    return query.instant() if instant else query.range()


def _panel(spec: PanelSpec, panel_id: int) -> gd.Panel:
    """The SDK builder for one spec (the kinds map onto three Grafana panel types)."""
    builder: timeseries.Panel | stat.Panel | table.Panel
    if spec.kind == "stat":
        builder = stat.Panel().graph_mode(common.BigValueGraphMode.AREA)
        builder = builder.reduce_options(ReduceDataOptions().calcs(["lastNotNull"]))
    elif spec.kind == "table":
        builder = table.Panel()
    else:
        builder = timeseries.Panel().legend(
            VizLegendOptions().show_legend(True).display_mode(common.LegendDisplayMode.LIST)
        )
        if spec.kind == "bars":
            builder = builder.draw_style(common.GraphDrawStyle.BARS).fill_opacity(60)
        elif spec.kind == "share":
            builder = builder.stacking(StackingConfig().mode(common.StackingMode.PERCENT))
            builder = builder.fill_opacity(70)
    builder = builder.id(panel_id).title(spec.title).description(spec.description)
    builder = builder.unit(spec.unit).datasource(DATASOURCE).span(spec.width)
    builder = builder.height(spec.height)
    if "min" in spec.extra:
        builder = builder.min(spec.extra["min"])
    if "max" in spec.extra:
        builder = builder.max(spec.extra["max"])
    if spec.thresholds:
        builder = _with_thresholds(builder, spec.thresholds)
    for i, target in enumerate(spec.targets):
        builder = builder.with_target(_target(i, target, instant=spec.kind == "table"))
        if target.dashed:
            builder = builder.override_by_query(chr(ord("A") + i), DASHED)
    return builder  # type: ignore[return-value]  # every panel builder builds a dm.Panel


def _with_thresholds(
    builder: timeseries.Panel | stat.Panel | table.Panel,
    steps: tuple[tuple[float | None, str], ...],
) -> timeseries.Panel | stat.Panel | table.Panel:
    """Colour by ``steps``: a stat's value, a time series' threshold lines and areas."""
    config = gd.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE)
    builder = builder.thresholds(config.steps([dm.Threshold(v, c) for v, c in steps]))
    if isinstance(builder, stat.Panel):
        builder = builder.color_scheme(gd.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
        return builder.color_mode(common.BigValueColorMode.VALUE)
    if isinstance(builder, timeseries.Panel):
        style = GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.LINE_AND_AREA)
        return builder.thresholds_style(style)
    return builder


def _variables(multi: bool) -> list[gd.QueryVariable | gd.DatasourceVariable]:
    """``datasource``, then ``namespace`` → ``deployment`` → ``pool``, each narrowing the next."""
    found: list[gd.QueryVariable | gd.DatasourceVariable] = [
        gd.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    ]
    chain = (
        ("namespace", "Namespace", "namespace", ""),
        ("deployment", "Deployment", "specdeploy_deployment", 'namespace=~"$namespace"'),
        (
            "pool",
            "Pool (GPU type)",
            "specdeploy_pool",
            'namespace=~"$namespace", specdeploy_deployment=~"$deployment"',
        ),
    )
    for name, label, source, matchers in chain:
        variable = (
            gd.QueryVariable(name)
            .label(label)
            .datasource(DATASOURCE)
            .query(f"label_values({VARIABLE_METRIC}{{{matchers}}}, {source})")
            .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(dm.VariableSort.ALPHABETICAL_ASC)
            .multi(multi)
            .include_all(multi)
        )
        found.append(variable)
    return found


def build(
    title: str, uid: str, description: str, rows: Sequence[tuple[str, Sequence[PanelSpec]]], *,
    multi: bool,
) -> dict[str, object]:  # fmt: skip
    board = (
        gd.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["specdeploy", "speculative-decoding", "vllm"])
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .readonly()
    )
    for variable in _variables(multi):
        board = board.with_variable(variable)
    panel_id = 1
    for row_title, specs in rows:
        board = board.with_row(gd.Row(row_title).id(panel_id))
        panel_id += 1
        for spec in specs:
            board = board.with_panel(_panel(spec, panel_id))
            panel_id += 1
    encoded: dict[str, object] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    return encoded


# ---- the panels ---------------------------------------------------------------------


def k_panels(by_pod: bool) -> list[PanelSpec]:
    k_target = (
        t(q.K_NOW, "{{pod}}") if by_pod else t(q.K_MEAN_OVER_PODS, f"{POOL_LEGEND} (mean of pods)")
    )
    return [
        PanelSpec(
            "K chosen over time",
            "The draft length the add-on chose for each pod's latest step (specdeploy_k). "
            "K follows the batch size: high K at low load, low K (or 0) at high load.",
            "short",
            (k_target,),
            extra={"min": 0},
        ),
        PanelSpec(
            "K distribution (share of steps)",
            "Share of engine steps run at each K over the rate interval (specdeploy_steps_total).",
            "percentunit",
            (t(q.STEP_SHARE_BY_K, f"{POOL_LEGEND} K={{{{k}}}}" if not by_pod else "K={{k}}"),),
            kind="share" if by_pod else "timeseries",
        ),
    ]


def acceptance_panels() -> list[PanelSpec]:
    return [
        PanelSpec(
            "Live acceptance per position (a_i)",
            "Accepted over reached per draft position: a position the drafter did not propose "
            "counts as rejected (the a_i of AL(K)), against the profile's a_i (dashed) for the "
            "table in force (specdeploy_acceptance_profile) and vLLM's own view, accepted given a "
            "draft. Live far below the profile's: the workload moved (acceptance drift).",
            "percentunit",
            (
                t(q.ACCEPTANCE_BY_POSITION, f"{POOL_LEGEND} a_{{{{position}}}}"),
                t(q.ACCEPTANCE_PROFILE, f"{POOL_LEGEND} profile a_{{{{position}}}}", dashed=True),
                t(q.ACCEPTANCE_GIVEN_DRAFT, f"{POOL_LEGEND} given a draft, pos {{{{position}}}}"),
            ),
            extra={"min": 0, "max": 1},
        ),
        PanelSpec(
            "Drafting rate per position (q_i)",
            "Proposed over reached per position: how often the drafter had a token to offer. "
            "Near 1 for EAGLE heads and draft models; n-gram and suffix drafters fall below.",
            "percentunit",
            (t(q.DRAFTING_RATE_BY_POSITION, f"{POOL_LEGEND} q_{{{{position}}}}"),),
            extra={"min": 0, "max": 1},
        ),
        PanelSpec(
            "Acceptance length (tokens per sequence per step)",
            "AL = 1 + accepted tokens per decoding sequence-step, bonus token included (the "
            "add-on's counters). vLLM's own mean is per request with a draft.",
            "short",
            (
                t(q.ACCEPTANCE_LENGTH, f"{POOL_LEGEND} AL"),
                t(q.VLLM_ACCEPTANCE_LENGTH, f"{POOL_LEGEND} vLLM mean acceptance length"),
            ),
            extra={"min": 1},
        ),
    ]


def cost_panels() -> list[PanelSpec]:
    return [
        PanelSpec(
            "Step time by K (clean decode steps)",
            "Mean step time per K: specdeploy_step_seconds (no prefill in the step, K unchanged).",
            "s",
            (t(q.MEAN_STEP_SECONDS_BY_K, f"{POOL_LEGEND} K={{{{k}}}}"),),
        ),
        PanelSpec(
            "Step time by batch size",
            "Mean step time per batch-size bucket (all K): the cost side of K*.",
            "s",
            (t(q.MEAN_STEP_SECONDS_BY_BUCKET, f"{POOL_LEGEND} bs {{{{batch_bucket}}}}"),),
        ),
        PanelSpec(
            "Verified tokens per sequence-step",
            "1 + the proposal length, averaged over decoding sequences: what a step verifies "
            "(step time grows with it, not with K alone).",
            "short",
            (t(q.VERIFIED_PER_SEQUENCE_STEP, POOL_LEGEND),),
            extra={"min": 1},
        ),
    ]


def goodput_panels() -> list[PanelSpec]:
    return [
        PanelSpec(
            "Goodput: predicted against observed (per sequence)",
            "Predicted: the policy's AL/ITL for the K in force at the smoothed batch size. "
            "Observed: AL over the mean clean-decode step time, from the same counters.",
            "suffix: tok/s",
            (
                t(q.PREDICTED_GOODPUT, f"{POOL_LEGEND} predicted", dashed=True),
                t(q.OBSERVED_GOODPUT, f"{POOL_LEGEND} observed"),
            ),
        ),
        PanelSpec(
            "Estimated speedup over plain decoding",
            "The policy's predicted goodput for the K in force over plain vLLM's, at the "
            "smoothed batch size, from the add-on of each speculating pod (red below 1.0x: "
            "speculation loses). A pool the live floor rolled to plain decoding runs no "
            "add-on: only its canary shows here; the live floor panels below say which.",
            "suffix: x",
            (t(q.SPEEDUP, POOL_LEGEND),),
            kind="stat",
            width=6,
            thresholds=LOSS_BELOW_ONE,
        ),
        PanelSpec(
            "Output tokens per second (vLLM)",
            "vllm:generation_tokens_total: what the pool serves, all sequences together.",
            "suffix: tok/s",
            (t(q.GENERATION_TOKENS, POOL_LEGEND),),
            width=6,
        ),
        PanelSpec(
            "Live floor: throughput over plain decoding (R, operator)",
            "The operator's R per telemetry window: what the pods ran over plain decoding at "
            "the batch sizes they served, with its 95% bounds (dashed). Source pool: the pool "
            "speculates; canary: the live floor rolled the pool to plain decoding and one "
            "canary replica speculates to measure the way back (R's upper bound below 1 - "
            "margin for some windows sends a pool to plain, the canary's lower bound above "
            "1 + margin brings it back).",
            "suffix: x",
            (
                t(q.LIVE_RATIO, f"{POOL_LEGEND} R ({{{{source}}}})"),
                t(q.LIVE_RATIO_LOW, f"{POOL_LEGEND} low ({{{{source}}}})", dashed=True),
                t(q.LIVE_RATIO_HIGH, f"{POOL_LEGEND} high ({{{{source}}}})", dashed=True),
            ),
            width=18,
            thresholds=LOSS_BELOW_ONE,
        ),
        PanelSpec(
            "Pools in plain decoding (live floor)",
            "Pools the live floor rolled to plain decoding on live evidence that speculation "
            "lost (specdeploy_operator_pool_floor_state); 0 when every pool speculates. "
            "`kubectl get sdep` and the pool's status say why.",
            "short",
            (t(q.POOLS_PLAIN, "plain decoding"),),
            kind="stat",
            width=6,
        ),
    ]


def load_panels(by_pod: bool) -> list[PanelSpec]:
    batch = t(q.BATCH_SIZE_NOW, "{{pod}}") if by_pod else t(q.RUNNING, f"{POOL_LEGEND} running")
    return [
        PanelSpec(
            "Batch-size distribution (share of steps)",
            "Share of clean decode steps per power-of-two batch-size bucket.",
            "percentunit",
            (t(q.STEP_SHARE_BY_BATCH_BUCKET, f"{POOL_LEGEND} bs {{{{batch_bucket}}}}"),),
            kind="share" if by_pod else "timeseries",
        ),
        PanelSpec(
            "Batch size now" if by_pod else "Requests running",
            "The latest step's batch size per pod (specdeploy_batch_size)"
            if by_pod
            else "vllm:num_requests_running summed over the pool's pods.",
            "short",
            (batch,),
            extra={"min": 0},
        ),
    ]


def serving_panels() -> list[PanelSpec]:
    return [
        PanelSpec(
            "Request rate (vLLM)",
            "Finished requests per second by finish reason (vllm:request_success_total).",
            "reqps",
            (t(q.REQUEST_RATE, f"{POOL_LEGEND} {{{{finished_reason}}}}"),),
            width=8,
        ),
        PanelSpec(
            "Request latency (vLLM)",
            "End-to-end latency p50/p99 and time to first token p99, from vLLM's histograms.",
            "s",
            (
                t(q.E2E_P50, f"{POOL_LEGEND} e2e p50"),
                t(q.E2E_P99, f"{POOL_LEGEND} e2e p99"),
                t(q.TTFT_P99, f"{POOL_LEGEND} TTFT p99"),
            ),
            width=8,
        ),
        PanelSpec(
            "Inter-token latency p50 (vLLM)",
            "vllm:inter_token_latency_seconds: with speculation a step yields AL tokens, so "
            "this falls as acceptance rises.",
            "s",
            (t(q.ITL_P50, POOL_LEGEND),),
            width=8,
        ),
    ]


def control_panels() -> list[PanelSpec]:
    return [
        PanelSpec(
            "Replicas (scraped vLLM pods up)",
            "Serving pods per pool whose vLLM endpoint Prometheus scrapes successfully.",
            "short",
            (t(q.REPLICAS, POOL_LEGEND),),
            width=6,
            extra={"min": 0},
        ),
        PanelSpec(
            "Table generation",
            "Tables each pod's add-on has installed since it started; a step up is a new "
            "table pushed by the operator, without a restart.",
            "short",
            (t(q.TABLE_GENERATION, "{{pod}}"),),
            width=6,
        ),
        PanelSpec(
            "Table reload and policy errors (over the range)",
            "Table files the add-on rejected (the last good table stays) and policy calls "
            "that raised. Anything above 0 deserves a look.",
            "short",
            (
                t(q.TABLE_RELOAD_ERRORS, f"{POOL_LEGEND} reload errors"),
                t(q.POLICY_ERRORS, f"{POOL_LEGEND} policy errors"),
            ),
            kind="bars",
            width=6,
        ),
        PanelSpec(
            "Profile and table in force",
            "Per pool: the policy, SpeculationProfile and table digest in force "
            "(specdeploy_table_info). A pool still profiling has no serving pod yet, so no "
            "row: `kubectl get sdep` shows its phase.",
            "short",
            (t(q.TABLE_IN_FORCE, POOL_LEGEND),),
            kind="table",
            width=6,
        ),
        PanelSpec(
            "Pools whose profiling failed",
            "Pools whose Profiled condition says their profiling Job failed "
            "(specdeploy_operator_profiling_failed); 0 when none.",
            "short",
            (t(q.PROFILING_FAILED, "profiling failed"),),
            kind="stat",
            width=6,
        ),
        PanelSpec(
            "Pools by state",
            "How many pools are Profiling, RollingOut, Ready, Degraded or Failed "
            "(specdeploy_operator_pool_state): the profiling state of a pool that has no "
            "serving pod yet.",
            "short",
            (t(q.POOL_STATES, "{{state}}"),),
            kind="stat",
            width=6,
        ),
    ]


def operator_panels() -> list[PanelSpec]:
    return [
        PanelSpec(
            "Operator reconciles",
            "Reconciles per second by outcome (ok | retry | error).",
            "ops",
            (t(q.RECONCILES, "{{outcome}}"),),
            width=6,
        ),
        PanelSpec(
            "Telemetry loop: seconds since the last cycle",
            "time() minus the last telemetry cycle's end: it grows when the loop stalls.",
            "s",
            (t(q.TELEMETRY_AGE, "age"),),
            width=6,
        ),
        PanelSpec(
            "Operator: pools, leaders, PromQL failures",
            "Pools in the deployments' status, acting operators (1) and failed PromQL "
            "queries per second by problem.",
            "short",
            (
                t(q.OPERATOR_POOLS, "pools"),
                t(q.OPERATOR_LEADERS, "leaders"),
                t(q.PROMQL_FAILURES, "failures/s {{problem}}"),
            ),
            width=6,
        ),
    ]


def fleet() -> dict[str, object]:
    return build(
        "specdeploy / fleet",
        "specdeploy-fleet",
        "Every pool of every SpeculativeDeployment: K, acceptance, goodput, load and health.",
        [
            ("Speculation", [*k_panels(by_pod=False), *acceptance_panels()[::2]]),
            ("Goodput", goodput_panels()),
            ("Load and serving", [*load_panels(by_pod=False), *serving_panels()]),
            ("Control", [*control_panels(), *operator_panels()]),
        ],
        multi=True,
    )


def pool() -> dict[str, object]:
    return build(
        "specdeploy / pool",
        "specdeploy-pool",
        "One pool of one SpeculativeDeployment, pod by pod: why K is what it is.",
        [
            ("K", k_panels(by_pod=True)),
            ("Acceptance (the workload)", acceptance_panels()),
            ("Step cost (the hardware)", cost_panels()),
            ("Goodput", goodput_panels()),
            ("Load", load_panels(by_pod=True)),
            ("Serving (vLLM)", serving_panels()),
            ("Tables and replicas", control_panels()),
        ],
        multi=False,
    )


def render(board: dict[str, object]) -> str:
    return json.dumps(board, indent=2, sort_keys=True) + "\n"


def files() -> dict[str, str]:
    """Chart-relative path -> file content, for ``specdeploy chart generate``."""
    return {FLEET_FILE: render(fleet()), POOL_FILE: render(pool())}
