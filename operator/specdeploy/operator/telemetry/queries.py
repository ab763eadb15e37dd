"""The PromQL of one interval, batched, and the windows its answers make.

One query per metric family for every due deployment at once (the same
Prometheus and window): ``sum by (namespace, specdeploy_deployment,
specdeploy_pool, ...)`` over the add-on's counters and a few of vLLM's own, so
the number of queries does not grow with pools or deployments, only the answers
do. The scrape labels are the contract with the PodMonitor (or the local
cluster's file SD): ``namespace``, ``specdeploy_deployment`` (the pods'
``specdeploy.io/deployment`` label), ``specdeploy_pool`` (their
``specdeploy.io/pool`` label, the sanitised GPU type), and on the live floor's
plain reference pod ``specdeploy_plain_reference`` (its
``specdeploy.io/plain-reference`` label), which splits vLLM's time per output
token between that pod and the pool's others.

Counters are cumulative per pod; ``increase(...[window])`` gives each pod's
count over the window (reset-safe) and the sum adds the pool's pods.
Pure: strings in, ``PoolWindow`` values out.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from specdeploy.operator.telemetry.interval import promql_duration
from specdeploy.operator.telemetry.vector import Query, Sample
from specdeploy.operator.telemetry.window import PoolKey, PoolWindow, StepTimes
from specdeploy.runtime.contract import Series, SeriesLabel

NAMESPACE, DEPLOYMENT, POOL = "namespace", "specdeploy_deployment", "specdeploy_pool"
BY = f"{NAMESPACE}, {DEPLOYMENT}, {POOL}"

REACHED, PROPOSED, ACCEPTED = "reached", "proposed", "accepted"
VERIFIED, SEQUENCE_STEPS = "verified", "sequence_steps"
STEP_SECONDS, STEP_COUNT, STEPS_BY_K = "step_seconds", "step_count", "steps_by_k"
STEP_BATCH_SIZES = "step_batch_sizes"
K0_PASS_SECONDS, K0_PASSES = "k0_pass_seconds", "k0_passes"
REQUESTS, FRESHNESS = "requests", "freshness"
GENERATION, WAITING = "generation", "waiting"
TPOT_SECONDS, TPOT_REQUESTS = "tpot_seconds", "tpot_requests"
TPOT = "vllm:request_time_per_output_token_seconds"
REFERENCE = "specdeploy_plain_reference"
"""The scrape label of the live floor's plain reference pod (its ``specdeploy.io/plain-reference``
pod label): its time per output token is plain decoding's beside the speculating pods'."""

_CELL = f"{SeriesLabel.BATCH_BUCKET}, {SeriesLabel.K}"
_COUNTERS: tuple[tuple[str, str, str], ...] = (
    (REACHED, Series.REACHED.total, SeriesLabel.POSITION),
    (PROPOSED, Series.PROPOSED.total, SeriesLabel.POSITION),
    (ACCEPTED, Series.ACCEPTED.total, SeriesLabel.POSITION),
    (VERIFIED, Series.VERIFIED.total, ""),
    (SEQUENCE_STEPS, Series.SEQUENCE_STEPS.total, ""),
    (STEP_SECONDS, Series.STEP_SECONDS.histogram_sum, _CELL),
    (STEP_COUNT, Series.STEP_SECONDS.histogram_count, _CELL),
    (STEP_BATCH_SIZES, Series.STEP_BATCH_SIZES.total, _CELL),
    (STEPS_BY_K, Series.STEPS.total, SeriesLabel.K),
    (K0_PASS_SECONDS, Series.K0_PASS_SECONDS.total, SeriesLabel.BATCH_BUCKET),
    (K0_PASSES, Series.K0_PASSES.total, SeriesLabel.BATCH_BUCKET),
)
REQUIRED = (REACHED, SEQUENCE_STEPS, FRESHNESS)
"""Families every speculating pool exports; the others may legitimately be empty."""
STATEFUL_DRAFTERS_ONLY = frozenset({Series.K0_PASS_SECONDS.total, Series.K0_PASSES.total})
"""Families only pods whose drafter runs a K=0 pass export (EAGLE, EAGLE-3, draft models)."""


@dataclass(frozen=True)
class Target:
    """A deployment to ask about: its namespace and its ``specdeploy.io/deployment`` label."""

    namespace: str
    deployment: str


def _regex_alternatives(values: Iterable[str]) -> str:
    # Label values are [A-Za-z0-9._-] (naming.label_value): only '.' needs escaping;
    # the backslash is doubled for the PromQL string literal.
    return "|".join(v.replace(".", "\\\\.") for v in sorted(set(values)))


def selector(targets: Sequence[Target]) -> str:
    """A label matcher for exactly these deployments (exact matches for one)."""
    if not targets:
        raise ValueError("no deployment to select")
    if len(targets) == 1:
        t = targets[0]
        return f'{{{NAMESPACE}="{t.namespace}", {DEPLOYMENT}="{t.deployment}"}}'
    namespaces = _regex_alternatives(t.namespace for t in targets)
    deployments = _regex_alternatives(t.deployment for t in targets)
    return f'{{{NAMESPACE}=~"{namespaces}", {DEPLOYMENT}=~"{deployments}"}}'


def build_queries(targets: Sequence[Target], window_seconds: float) -> list[Query]:
    """Every family's query for these deployments over one window."""
    sel, window = selector(targets), promql_duration(window_seconds)
    queries = []
    for name, metric, extra in _COUNTERS:
        by = f"{BY}, {extra}" if extra else BY
        queries.append(Query(name, f"sum by ({by}) (increase({metric}{sel}[{window}]))"))
    queries.append(
        Query(REQUESTS, f"sum by ({BY}) (rate(vllm:request_success_total{sel}[{window}]))")
    )
    # The autoscaler's demand: tokens served per second and the queue waiting now.
    queries.append(
        Query(GENERATION, f"sum by ({BY}) (rate(vllm:generation_tokens_total{sel}[{window}]))")
    )
    queries.append(Query(WAITING, f"sum by ({BY}) (vllm:num_requests_waiting{sel})"))
    # The live floor's A/B: time per output token, the plain reference pod apart.
    for name, suffix in ((TPOT_SECONDS, "sum"), (TPOT_REQUESTS, "count")):
        queries.append(
            Query(name, f"sum by ({BY}, {REFERENCE}) (increase({TPOT}_{suffix}{sel}[{window}]))")
        )
    # The newest sample's time per pool: the freshness test (value: a Unix time).
    queries.append(
        Query(FRESHNESS, f"max by ({BY}) (timestamp({Series.SEQUENCE_STEPS.total}{sel}))")
    )
    return queries


def _key(sample: Sample) -> PoolKey | None:
    labels = sample.labels
    if not all(labels.get(k) for k in (NAMESPACE, DEPLOYMENT, POOL)):
        return None  # a series without the scrape labels is not one of ours
    return labels[NAMESPACE], labels[DEPLOYMENT], labels[POOL]


def _by_pool(samples: Iterable[Sample]) -> dict[PoolKey, list[Sample]]:
    grouped: dict[PoolKey, list[Sample]] = {}
    for s in samples:
        key = _key(s)
        if key is not None:
            grouped.setdefault(key, []).append(s)
    return grouped


def _int_label(sample: Sample, name: str) -> int | None:
    try:
        value = int(sample.labels.get(name, ""))
    except ValueError:
        return None
    return value if value >= 0 else None


def _positions(samples: Sequence[Sample], max_positions: int) -> tuple[float, ...]:
    values = [0.0] * max_positions
    for s in samples:
        position = _int_label(s, SeriesLabel.POSITION)
        if position is not None and 1 <= position <= max_positions:
            values[position - 1] += max(s.value, 0.0)
    return tuple(values)


def _total(samples: Sequence[Sample]) -> float:
    return sum(max(s.value, 0.0) for s in samples)


Key = TypeVar("Key", bound=Hashable)


def _summed(samples: Sequence[Sample], key: Callable[[Sample], Key | None]) -> dict[Key, float]:
    """The samples' values (negatives as 0) summed per ``key``; samples keyed None left out."""
    out: dict[Key, float] = {}
    for s in samples:
        at = key(s)
        if at is not None:
            out[at] = out.get(at, 0.0) + max(s.value, 0.0)
    return out


def _timed(
    seconds: Sequence[Sample], counts: Sequence[Sample], key: Callable[[Sample], Key | None]
) -> dict[Key, StepTimes]:
    """Seconds and counts per ``key``, where anything was counted."""
    total, count = _summed(seconds, key), _summed(counts, key)
    return {at: StepTimes(total.get(at, 0.0), n) for at, n in count.items() if n > 0}


def _cell(sample: Sample) -> tuple[str, int] | None:
    k = _int_label(sample, SeriesLabel.K)
    bucket = sample.labels.get(SeriesLabel.BATCH_BUCKET)
    return (bucket, k) if k is not None and bucket else None


def _bucket(sample: Sample) -> str | None:
    return sample.labels.get(SeriesLabel.BATCH_BUCKET) or None


def _k(sample: Sample) -> int | None:
    return _int_label(sample, SeriesLabel.K)


def _role(reference: bool) -> Callable[[Sample], bool | None]:
    """Keys the plain reference pod's samples (``reference``) or the pool's others."""
    return lambda s: True if (s.labels.get(REFERENCE) == "true") == reference else None


def _tpot(seconds: Sequence[Sample], counts: Sequence[Sample], reference: bool) -> StepTimes | None:
    return _timed(seconds, counts, _role(reference)).get(True)


def windows_from(
    answers: Mapping[str, Sequence[Sample]], *, window_seconds: float, max_positions: int = 16
) -> dict[PoolKey, PoolWindow]:
    """Per pool, its window; only pools with a freshness sample (their series exist)."""
    grouped = {name: _by_pool(samples) for name, samples in answers.items()}
    fresh = grouped.get(FRESHNESS, {})
    windows = {}
    for key, samples in fresh.items():

        def of(name: str, key: PoolKey = key) -> list[Sample]:
            return grouped.get(name, {}).get(key, [])

        newest = max(s.value for s in samples)
        evaluated = max(s.time for s in samples)
        requests, generation, waiting = of(REQUESTS), of(GENERATION), of(WAITING)
        windows[key] = PoolWindow(
            window_seconds=window_seconds,
            reached=_positions(of(REACHED), max_positions),
            proposed=_positions(of(PROPOSED), max_positions),
            accepted=_positions(of(ACCEPTED), max_positions),
            verified_tokens=_total(of(VERIFIED)),
            sequence_steps=_total(of(SEQUENCE_STEPS)),
            step_times=_timed(of(STEP_SECONDS), of(STEP_COUNT), _cell),
            step_batch_sizes=_summed(of(STEP_BATCH_SIZES), _cell),
            steps_by_k=_summed(of(STEPS_BY_K), _k),
            k0_passes=_timed(of(K0_PASS_SECONDS), of(K0_PASSES), _bucket),
            requests_per_second=_total(requests) if requests else None,
            generation_tokens_per_second=_total(generation) if generation else None,
            tpot=_tpot(of(TPOT_SECONDS), of(TPOT_REQUESTS), reference=False),
            reference_tpot=_tpot(of(TPOT_SECONDS), of(TPOT_REQUESTS), reference=True),
            waiting_requests=_total(waiting) if waiting else None,
            age_seconds=max(evaluated - newest, 0.0),
        )
    return windows
