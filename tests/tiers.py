"""The two test tiers: which tests ``make test`` runs on every change, which wait for nightly.

The per-change tier (``make test``; budget 15 min warm on 2 cores of either
CPU class, with or without AVX-512, at most three vLLM engine boots) holds
every test unless a row below sends it to ``nightly`` (``make nightly``;
budget 80 min): benchmark-grade runs, and the second or third proof of
something the per-change tier already shows. The longest row that prefixes a
test's node id decides, so a module can go nightly while one of its cases
stays. The root conftest.py marks each test
from this table (``nightly``); ``tests/unit/repo/test_test_tiers.py`` fails
on a row that names no test.
"""

from __future__ import annotations

NIGHTLY, PER_CHANGE = "nightly", "per_change"
CHAOS = (
    "e2e/tests/cluster/test_chaos.py::"
    "test_the_operator_converges_after_the_fault_with_every_invariant_held"
)
TIER_BY_NODEID: dict[str, tuple[str, str]] = {
    # node-id prefix: (tier, why)
    "tests/model/test_profiler_regime.py": (
        NIGHTLY,
        "a wall-clock ratio of two measurements minutes apart (benchmark-grade); two engines",
    ),
    "tests/model/test_drafts_vllm.py": (
        NIGHTLY,
        "EAGLE head layout and QUICK training: two engine boots beyond the per-change three",
    ),
    "tests/model/test_addon_eagle_k0.py": (
        NIGHTLY,
        "an EAGLE server with the add-on through K=0 and back: an engine boot beyond the "
        "per-change three; the plugin's n-gram path is test_addon_e2e's",
    ),
    "e2e/tests/cluster/test_real_vllm_pool.py": (
        NIGHTLY,
        "a fourth engine boot; the real engine's series the telemetry reads are checked in "
        "tests/model/test_addon_e2e.py",
    ),
    "e2e/tests/cluster/test_cluster_autoscaling.py::"
    "test_a_load_ramp_grows_the_pool_within_max_and_it_shrinks_after_the_window[hpa]": (
        NIGHTLY,
        "the HPA chain is test_cluster_metrics_adapter's; the operator ramp stays",
    ),
    "e2e/tests/cluster/test_fuzz_specs.py::"
    "test_generated_specs_are_rejected_refused_by_field_or_served_and_the_operator_stays_up": (
        NIGHTLY,
        "1,000 generated specs; the saved regressions replay per change",
    ),
    "e2e/tests/cluster/test_cluster_leader_election.py::"
    "test_a_skewed_upgrade_hands_over_once_and_the_new_rendering_lands_once": (
        NIGHTLY,
        "the second leader flow; the first (kill -9, takeover) stays",
    ),
    "e2e/tests/cluster/test_fuzz_specs.py::"
    "test_a_saved_failing_case_now_does_what_its_fixture_expects": (
        NIGHTLY,
        "the saved regressions replay through validate per change "
        "(e2e/tests/harness/test_fuzz_harness.py); on the cluster with the nightly fuzz",
    ),
    "e2e/tests/cluster/test_loop.py::"
    "test_with_prometheus_down_the_tables_freeze_and_health_returns_with_it": (
        NIGHTLY,
        "the freeze and the PrometheusUnreachable condition are decided in "
        "tests/unit/operator/telemetry/test_telemetry_tables.py; the real process here",
    ),
    CHAOS: (
        NIGHTLY,
        "the chaos matrix, judged by I1-I7 (make chaos records it): per change, a SIGKILLed "
        "operator is the leader-election takeover's, a restart mid-profiling that duplicates "
        "no Job the lifecycle test's, the exit on a Lease lost while the API server is down "
        "tests/unit/operator/test_operator_leader's, and the oracle's checks e2e/tests/"
        "harness/test_chaos_pure's; C1b-n2, then C2-apiserver left the tier for its budget",
    ),
}


def tier_of(nodeid: str) -> str:
    """The tier of a test: the longest ``TIER_BY_NODEID`` row prefixing its node id."""
    rows = [r for r in TIER_BY_NODEID if nodeid == r or nodeid.startswith((r + "::", r + "["))]
    return TIER_BY_NODEID[max(rows, key=len)][0] if rows else PER_CHANGE
