"""The pod -> operator half of the contract: the series the add-on exports are the ones the
operator's telemetry queries and the dashboards read, all named by ``contract.Series``."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from specdeploy.chart import dashboard_queries
from specdeploy.operator.telemetry.queries import Target, build_queries
from specdeploy.runtime.contract import Series, bucket_bounds, bucket_index, bucket_label
from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.vllm_addon import k0_pass
from specdeploy.runtime.vllm_addon.drafting import DraftingWindow, Drift
from specdeploy.runtime.vllm_addon.metrics import AddonMetrics

pytestmark = pytest.mark.unit

SCRAPE_LABELS = {
    "specdeploy_deployment",
    "specdeploy_namespace",
    "specdeploy_pool",
    "specdeploy_plain_reference",
}
"""Labels the scrape adds (PodMonitor relabelling), spelled like series in PromQL."""
ADDON_NAME = re.compile(r"\bspecdeploy_(?!operator_)[a-z0-9_]+")


def exported_samples() -> set[str]:
    """Every sample name a scrape of a busy add-on shows."""
    metrics = AddonMetrics("pool", 3)
    metrics.step(2, StepRecord(4, 2, 0.01, (4, 3), (4, 3), (3, 2), 4, 9, 400))
    metrics.profile_acceptance((0.8, 0.6, 0.4))
    metrics.profile_drafting_rate(0.9)
    metrics.table_installed(1, "adaptive", "p-x", "d")
    metrics.goodput(100.0)
    metrics.gain_over_vanilla(1.1)
    metrics.reload_failed()
    metrics.policy_failed()
    metrics.fault("step")
    metrics.explored(1)
    metrics.referenced(16)
    metrics.drafting(DraftingWindow(0.5, 0.9, Drift.BELOW, changed=True))
    with tempfile.TemporaryDirectory() as folder:  # an EAGLE pod's K=0 passes (k0_pass)
        path = str(Path(folder) / "ledger.f64")
        k0_pass.PassLedger(path, create=True).add(4, 0.002)
        series = k0_pass.series_for("pool", {k0_pass.LEDGER_ENV: path})
        assert series is not None
        metrics.registry.register(series)
        return {s.name for family in metrics.registry.collect() for s in family.samples}


def scraped_names(member: Series) -> set[str]:
    return {
        member.value,
        member.total,
        member.histogram_sum,
        member.histogram_count,
        member.histogram_buckets,
    }


def read_names(promql: str) -> set[str]:
    return set(ADDON_NAME.findall(promql)) - SCRAPE_LABELS


def test_every_family_the_contract_names_is_exported_by_the_addon() -> None:
    exported = exported_samples()
    missing = [m.value for m in Series if not scraped_names(m) & exported]
    assert not missing, missing


def test_the_operators_queries_read_only_exported_series() -> None:
    exported = exported_samples()
    queries = build_queries([Target("ns", "dep")], 60.0)
    read = set().union(*(read_names(q.promql) for q in queries))
    assert read  # the reached, proposed, accepted, ... families
    assert read <= exported, read - exported


def test_the_dashboards_read_only_exported_series() -> None:
    exported = exported_samples()
    panels = [v for k, v in vars(dashboard_queries).items() if k.isupper() and isinstance(v, str)]
    read = set().union(*(read_names(p) for p in panels))
    assert len(read) >= 10
    assert read <= exported, read - exported


@pytest.mark.parametrize("batch_size", [1, 2, 3, 4, 5, 8, 9, 16, 17, 100, 256, 257])
def test_a_bucket_label_reads_back_as_the_bucket_holding_its_batch_size(batch_size: int) -> None:
    bucket = bucket_index(bucket_label(batch_size))
    assert bucket is not None
    lo, hi = bucket_bounds(bucket)
    assert lo <= batch_size <= hi
