"""The chaos matrix (review §5.3): faults on the local control plane, judged by I1-I7.

Every scenario of ``e2e.chaos.scenarios.matrix()`` is a case here, all of
them in ``make nightly`` (the root conftest.py's tier table, ``tests/tiers.py``,
says why): per change, an operator killed with SIGKILL is the leader-election
test's (the standby takes over and converges), a restart mid-profiling that
duplicates no Job is the lifecycle test's, and the oracle's checks are
``e2e/tests/harness/test_chaos_pure.py``'s. ``make chaos`` runs the matrix
with the full 120 s steady-state window and records it. The operator runs behind the fault proxy
under its own ServiceAccount and the ClusterRole it generates. The
steady-state window (I5) is ``STEADY_S``, shorter than the recorded matrix's
to keep a tier within its minutes. A failing scenario fails here with the
invariant and its evidence; none is skipped or expected to fail.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.chaos import lab as lab_mod
from e2e.chaos.scenarios import Scenario, matrix, run
from e2e.conftest import FLEET
from e2e.localcluster import cluster

STEADY_S = 10.0
"""One telemetry interval of the lab's deployments (``oracle.TELEMETRY_INTERVAL_S``): a
write the loop repeats each interval shows in it."""
MATRIX = matrix()


@pytest.fixture(scope="module")
def lab(local_cluster: cluster.Cluster) -> Iterator[lab_mod.Lab]:
    opened = lab_mod.open_lab(local_cluster, steady_s=STEADY_S, fleet=FLEET)
    try:
        yield opened
    finally:
        lab_mod.close_lab(opened)


@pytest.mark.parametrize("scenario", MATRIX, ids=[s.id for s in MATRIX])
def test_the_operator_converges_after_the_fault_with_every_invariant_held(
    lab: lab_mod.Lab, scenario: Scenario
) -> None:
    outcome = run(lab, scenario)

    failed = [f"{c.id}: {c.detail}" for c in outcome.checks if not c.ok]
    assert outcome.error is None, (
        f"{scenario.id} did not run to the end: {outcome.error}\n{outcome.notes}"
    )
    assert outcome.checks, "the oracle judged nothing"
    assert not failed, f"{scenario.id} ({scenario.title}): {failed}; notes: {outcome.notes}"
