"""The PromQL behind every dashboard panel, written once against metrics that exist.

Sources, and nothing else: the add-on's series (``runtime/.../vllm_addon/metrics.py``
and ``step_series.py``), the operator's (``operator/.../metrics.py``), vLLM 0.32's
own (mirrored by ``e2e/emulated/vllm_metrics.py``) and the scrape-label contract
of the PodMonitor (``namespace``, ``pod``, ``specdeploy_deployment``,
``specdeploy_pool``, ``specdeploy_profile``, ``job`` = ``vllm`` |
``specdeploy-addon`` | ``specdeploy-operator``; ``e2e/localcluster/prometheus.py``).

Two ratios follow the design's one definition of acceptance: a_i is accepted
over *reached* (a position the drafter did not propose counts as rejected),
the drafting rate q_i is proposed over reached, and AL = 1 + accepted tokens
per decoding sequence-step. Rates use Grafana's ``$__rate_interval`` so a
panel never asks for a window shorter than four scrapes.
"""

from __future__ import annotations

from specdeploy.runtime.contract import Series, SeriesLabel

SELECTOR = 'namespace=~"$namespace", specdeploy_deployment=~"$deployment", specdeploy_pool=~"$pool"'
"""The three template variables as label matchers (both boards define all three: the
fleet board lets each take several values, the pool board one)."""
POOL = "namespace, specdeploy_deployment, specdeploy_pool"
"""Grouping of a per-pool series (a pool is named by all three labels)."""
RI = "$__rate_interval"


def rate(metric: str, by: str = POOL, *, extra: str = "") -> str:
    """``sum by (...) (rate(metric{selector}[$__rate_interval]))``."""
    sel = SELECTOR + (f", {extra}" if extra else "")
    return f"sum by ({by}) (rate({metric}{{{sel}}}[{RI}]))"


def ratio(numerator: str, denominator: str, by: str = POOL) -> str:
    """Per-group ratio of two counters' rates."""
    return f"{rate(numerator, by)}\n/\n{rate(denominator, by)}"


def gauge(metric: str, how: str = "avg", by: str = POOL, *, extra: str = "") -> str:
    """A gauge aggregated over the pool's pods."""
    sel = SELECTOR + (f", {extra}" if extra else "")
    return f"{how} by ({by}) ({metric}{{{sel}}})"


def quantile(q: float, histogram: str, by: str = POOL) -> str:
    """The q-quantile of a histogram over the pool's pods."""
    return f"histogram_quantile({q}, {rate(histogram + '_bucket', f'{by}, le')})"


# ---- speculation (the add-on) ---------------------------------------------------------

K_NOW = gauge(Series.K, "max", f"{POOL}, pod")
K_MEAN_OVER_PODS = gauge(Series.K)
STEPS_BY_K = rate(Series.STEPS.total, f"{POOL}, {SeriesLabel.K}")
STEP_SHARE_BY_K = (
    f"{rate(Series.STEPS.total, f'{POOL}, {SeriesLabel.K}')}\n"
    f"/ ignoring ({SeriesLabel.K}) group_left\n"
    f"{rate(Series.STEPS.total)}"
)
ACCEPTANCE_BY_POSITION = ratio(
    Series.ACCEPTED.total,
    Series.REACHED.total,
    f"{POOL}, {SeriesLabel.POSITION}",
)
ACCEPTANCE_PROFILE = gauge(Series.ACCEPTANCE_PROFILE, "avg", f"{POOL}, {SeriesLabel.POSITION}")
"""The profile's a_i for the table in force: the reference live acceptance drifts from."""
ACCEPTANCE_GIVEN_DRAFT = ratio(
    Series.ACCEPTED.total, Series.PROPOSED.total, f"{POOL}, {SeriesLabel.POSITION}"
)
DRAFTING_RATE_BY_POSITION = ratio(
    Series.PROPOSED.total,
    Series.REACHED.total,
    f"{POOL}, {SeriesLabel.POSITION}",
)
ACCEPTANCE_LENGTH = f"1 + {rate(Series.ACCEPTED.total)}\n/\n{rate(Series.SEQUENCE_STEPS.total)}"
VLLM_ACCEPTANCE_LENGTH = (
    f"1 + {rate('vllm:spec_decode_num_accepted_tokens_total')}\n/\n"
    f"{rate('vllm:spec_decode_num_drafts_total')}"
)
"""vLLM's own mean acceptance length: per request *with* a draft, so above the add-on's
whenever the drafter proposes nothing for some sequences."""
MEAN_STEP_SECONDS_BY_K = ratio(
    Series.STEP_SECONDS.histogram_sum,
    Series.STEP_SECONDS.histogram_count,
    f"{POOL}, {SeriesLabel.K}",
)
MEAN_STEP_SECONDS_BY_BUCKET = ratio(
    Series.STEP_SECONDS.histogram_sum,
    Series.STEP_SECONDS.histogram_count,
    f"{POOL}, {SeriesLabel.BATCH_BUCKET}",
)
VERIFIED_PER_SEQUENCE_STEP = ratio(Series.VERIFIED.total, Series.SEQUENCE_STEPS.total)
PREDICTED_GOODPUT = gauge(Series.PREDICTED_GOODPUT)
OBSERVED_GOODPUT = (
    f"(\n{ACCEPTANCE_LENGTH}\n)\n/\n(\n"
    f"{ratio(Series.STEP_SECONDS.histogram_sum, Series.STEP_SECONDS.histogram_count)}\n)"
)
"""AL over the mean clean-decode step time: tokens per second per sequence, the
quantity the policy predicts (``KEstimate.goodput``)."""
SPEEDUP = gauge(Series.PREDICTED_GAIN)
STEP_SHARE_BY_BATCH_BUCKET = (
    f"{rate(Series.STEP_SECONDS.histogram_count, f'{POOL}, {SeriesLabel.BATCH_BUCKET}')}\n"
    f"/ ignoring ({SeriesLabel.BATCH_BUCKET}) group_left\n"
    f"{rate(Series.STEP_SECONDS.histogram_count)}"
)
BATCH_SIZE_NOW = gauge(Series.BATCH_SIZE, "max", f"{POOL}, pod")
TABLE_GENERATION = gauge(Series.TABLE_GENERATION, "max", f"{POOL}, pod")
TABLE_RELOAD_ERRORS = (
    f"sum by ({POOL}) (increase({Series.TABLE_RELOAD_ERRORS.total}{{{SELECTOR}}}[$__range]))"
)
POLICY_ERRORS = f"sum by ({POOL}) (increase({Series.POLICY_ERRORS.total}{{{SELECTOR}}}[$__range]))"
TABLE_IN_FORCE = gauge(Series.TABLE_INFO, "max", f"{POOL}, policy, profile, digest")
"""Which table and profile each pool runs (a pool still profiling has no pod: its state is
``POOL_STATES``, from the operator)."""

# ---- vLLM's own ---------------------------------------------------------------------

REQUEST_RATE = rate("vllm:request_success_total", f"{POOL}, finished_reason")
GENERATION_TOKENS = rate("vllm:generation_tokens_total")
E2E_P50 = quantile(0.5, "vllm:e2e_request_latency_seconds")
E2E_P99 = quantile(0.99, "vllm:e2e_request_latency_seconds")
TTFT_P99 = quantile(0.99, "vllm:time_to_first_token_seconds")
ITL_P50 = quantile(0.5, "vllm:inter_token_latency_seconds")
RUNNING = gauge("vllm:num_requests_running", "sum")
WAITING = gauge("vllm:num_requests_waiting", "sum")
REPLICAS = f'count by ({POOL}) (up{{job="vllm", {SELECTOR}}} == 1)'

# ---- the operator -------------------------------------------------------------------

OPERATOR = 'job="specdeploy-operator"'
RECONCILES = f"sum by (outcome) (rate(specdeploy_operator_reconciles_total{{{OPERATOR}}}[{RI}]))"
TELEMETRY_AGE = (
    f"time() - (max(specdeploy_operator_telemetry_last_cycle_timestamp_seconds{{{OPERATOR}}}) > 0)"
)
"""The gauge is 0 until the first cycle ends: that is "no cycle yet", not 56 years ago."""
PROMQL_FAILURES = (
    f"sum by (problem) (rate(specdeploy_operator_promql_query_failures_total{{{OPERATOR}}}[{RI}]))"
)
OPERATOR_POOL_SELECTOR = (
    f'{OPERATOR}, specdeploy_namespace=~"$namespace", '
    'specdeploy_deployment=~"$deployment", specdeploy_pool=~"$pool"'
)
PROFILING_FAILED = (
    f"sum(specdeploy_operator_profiling_failed{{{OPERATOR_POOL_SELECTOR}}}) or vector(0)"
)
"""Pools whose profiling failed (the operator exports a series only for those: ``or
vector(0)`` makes "none" a 0, not "no data"). The operator's own ``namespace`` label is
its pod's, so the deployment's namespace is ``specdeploy_namespace``."""
POOL_STATES = (
    f"sum by (state) (max by (specdeploy_namespace, specdeploy_deployment, specdeploy_pool, "
    f"state) (specdeploy_operator_pool_state{{{OPERATOR_POOL_SELECTOR}}}))"
)
"""Pools per state (Profiling, RollingOut, Ready, Degraded, Failed), as the operator last
listed them: the profiling state a pool has before it has any pod. ``max by`` first, so a
standby operator's copy of the same series does not count twice."""
OPERATOR_POOL = "specdeploy_namespace, specdeploy_deployment, specdeploy_pool"
"""A pool in the operator's series (its own ``namespace`` label is the operator pod's)."""


def live_ratio(bound: str) -> str:
    """The live floor's R for one bound, per pool and source (pool | canary)."""
    return (
        f"max by ({OPERATOR_POOL}, source) (specdeploy_operator_pool_live_ratio"
        f'{{{OPERATOR_POOL_SELECTOR}, bound="{bound}"}})'
    )


LIVE_RATIO = live_ratio("estimate")
LIVE_RATIO_LOW = live_ratio("low")
LIVE_RATIO_HIGH = live_ratio("high")
"""R (the floor's evidence) and its 95% bounds: the pool's while it speculates, its
canary's while it runs plain decoding (``source``)."""
POOLS_PLAIN = (
    f"sum(max by ({OPERATOR_POOL}) (specdeploy_operator_pool_floor_state"
    f'{{{OPERATOR_POOL_SELECTOR}, state="plain"}})) or vector(0)'
)
"""Pools the live floor rolled to plain decoding (0 when none, not "no data")."""
OPERATOR_POOLS = f"max(specdeploy_operator_pools{{{OPERATOR}}})"
OPERATOR_LEADERS = f"sum(specdeploy_operator_leader{{{OPERATOR}}})"
