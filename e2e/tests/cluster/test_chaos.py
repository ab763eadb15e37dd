"""The per-PR chaos subset (review §5.3): faults on the local control plane, judged by I1-I7.

The scenarios marked ``per_pr`` in ``e2e.chaos.scenarios`` (``make chaos``
runs them all): a baseline, SIGKILL of the operator between two writes of
the first reconcile and of the reconcile that serves a landed profile, the
API server and etcd killed and restarted, the serving node removed, the
table ConfigMap edited by hand and the profiler's RoleBinding deleted. The
operator runs behind the fault proxy under its own ServiceAccount and the
ClusterRole it generates. The steady-state window (I5) is ``STEADY_S``,
shorter than the full matrix's 120 s to keep ``make test`` within minutes.
A failing scenario fails here with the invariant and its evidence; none is
skipped or expected to fail.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.chaos import lab as lab_mod
from e2e.chaos.scenarios import Scenario, matrix, run
from e2e.conftest import FLEET
from e2e.localcluster import cluster

STEADY_S = 20.0
PER_PR = [s for s in matrix() if s.per_pr]


@pytest.fixture(scope="module")
def lab(local_cluster: cluster.Cluster) -> Iterator[lab_mod.Lab]:
    opened = lab_mod.open_lab(local_cluster, steady_s=STEADY_S, fleet=FLEET)
    try:
        yield opened
    finally:
        lab_mod.close_lab(opened)


@pytest.mark.parametrize("scenario", PER_PR, ids=[s.id for s in PER_PR])
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
