"""F1/F3 on the local control plane: generated specs against the real API server and operator.

``SPECDEPLOY_FUZZ_SPECS`` specs (default 1,000) from the fixed seed, in
``make nightly`` (``tests/tiers.py``); ``make fuzz`` runs the same 1,000 and
records them in ``bench/results/fuzz_specs.{json,md}``. Every spec is rejected at admission,
or observed and then Valid=False naming one of its fields and owning
nothing, or valid with every child accepted; child names fit; the operator
stays up, reconciles a canary after every batch and logs no traceback
(``e2e/fuzz/oracle.py``). Emulated: no pod runs (``strategies.HOLD``), and
profiles are written by the harness (``e2e/fuzz/landing.py``). The saved
failing cases of ``e2e/fuzz/regressions/`` replay here on every change.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from e2e.fuzz import known, replay
from e2e.fuzz.__main__ import DEFAULT_SEED, target_of
from e2e.fuzz.generate import generate
from e2e.fuzz.runner import run
from e2e.localcluster import cluster

REGRESSIONS = replay.load_all()


@pytest.fixture(scope="module")
def operator(local_cluster: cluster.Cluster) -> Iterator[cluster.Cluster]:
    with cluster.operator_running(local_cluster):
        yield local_cluster


@pytest.mark.timeout(2400)  # nightly: 1,000 specs took 707 s on 2 cores (bench/results)
def test_generated_specs_are_rejected_refused_by_field_or_served_and_the_operator_stays_up(
    operator: cluster.Cluster,
) -> None:
    count = int(os.environ.get("SPECDEPLOY_FUZZ_SPECS", "1000"))
    bodies = generate(count, seed_value=DEFAULT_SEED)
    report = run(target_of(operator), bodies, seed=DEFAULT_SEED, batch_size=50)
    kinds = {o.kind for o in report.outcomes}
    assert {"rejected", "invalid", "valid"} <= kinds, "the strategies reach every outcome"
    assert report.profiles_landed and report.deployments_served, "valid specs reach serving"
    unknown, _known = known.split(report)
    assert unknown == [], "\n".join(unknown[:30])


def _case(case: replay.Regression) -> object:
    marks = [pytest.mark.xfail(reason=case.known_defect, strict=True)] if case.known_defect else []
    return pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", [_case(c) for c in REGRESSIONS])
def test_a_saved_failing_case_now_does_what_its_fixture_expects(
    operator: cluster.Cluster, case: replay.Regression
) -> None:
    prefix = f"regression-{case.name}"[:40].rstrip("-")
    report = run(
        target_of(operator), [case.body], seed=0, batch_size=1, prefix=prefix, log=lambda _m: None
    )
    (outcome,) = report.outcomes
    assert replay.problems(case, outcome) + report.batch_violations == []
