"""Fixtures for tests on the local control plane, built on ``e2e.localcluster``.

One cluster per pytest session (start-up costs seconds, not per test), in a
work directory of its own under ``pytest-clusters/`` that records the owning
session; a session killed half-way leaves nothing behind for long, because the
next session stops every cluster whose owner is gone. Each
test gets its own namespace, ready for pods (its ``default`` ServiceAccount
and ``kube-root-ca.crt`` exist), and deleted afterwards.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from e2e.localcluster import audit, binaries, cluster, identity, processes
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.waiting import wait_for
from specdeploy.runtime.kube import paths

# Two nodes of each type; tests that fill capacity use a type of their own.
FLEET = "h100=2,a100=2,l40s=2"


def clusters_root() -> Path:
    explicit = os.environ.get("SPECDEPLOY_TEST_CLUSTERS")
    return Path(explicit) if explicit else binaries.cache_root() / "pytest-clusters"


def reap_abandoned(root: Path) -> None:
    """Stop the clusters of sessions that died without tearing down (their owner is gone)."""
    for workdir in root.glob("*"):
        owner = workdir / "owner.json"
        record = processes.Record(**json.loads(owner.read_text())) if owner.exists() else None
        if record is None or not processes.alive(record):
            cluster.down(workdir, log=lambda _m: None)
            shutil.rmtree(workdir, ignore_errors=True)


def claim_workdir(root: Path) -> Path:
    """A work directory owned by this session, so concurrent sessions never share one."""
    workdir = root / f"session-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    ticks = processes.start_ticks(os.getpid())
    owner = processes.Record("pytest", os.getpid(), ticks if ticks is not None else -1)
    (workdir / "owner.json").write_text(json.dumps(owner.__dict__))
    return workdir


DESELECTED = pytest.StashKey[list[pytest.Item]]()
"""The tests the session's ``-m`` left out (a tier's run deselects the other tier's)."""


def pytest_deselected(items: Sequence[pytest.Item]) -> None:
    if items:
        items[0].config.stash.setdefault(DESELECTED, []).extend(items)


def ran_the_whole_tier(session: pytest.Session) -> bool:
    """Whether this session collected every module of ``e2e/tests/cluster`` and ran every
    test of theirs that ``make test`` runs: a whole run, or the per-change tier.

    The per-change tier counts as whole even where a module's every test is nightly's
    (the chaos matrix): its grants are then judged by what the tier ran, so a grant only
    a nightly test uses shows as unused, as it should (a per-change test must use it)."""
    here = (Path(__file__).parent / "tests" / "cluster").resolve()
    deselected = session.config.stash.get(DESELECTED, [])
    everything = [*session.items, *deselected]
    collected = {Path(str(item.path)).resolve() for item in everything}
    if not {p.resolve() for p in here.glob("test_*.py")} <= collected:
        return False
    return not any(
        Path(str(item.path)).resolve().parent == here and not item.get_closest_marker("nightly")
        for item in deselected
    )


def least_privilege_report(layout_log: Path, whole_suite: bool) -> list[str]:
    """What the audit log says against least privilege: RBAC refusals of the operator's
    requests, and (over a whole suite only) grants of its ClusterRole no request used."""
    from specdeploy.operator.builders.rbac import operator_cluster_role

    requests = list(audit.requests_of(layout_log, identity.USER))
    problems = [
        f"refused: {r.verb} {r.group}/{r.resource} in {r.namespace!r}"
        for r in audit.refused(requests)
    ]
    if whole_suite:
        unused = audit.unused_grants(operator_cluster_role(), requests)
        unused -= set(identity.GRANTED_WITHOUT_A_REQUEST)
        problems += [f"granted, never used: {v} {g}/{r}" for g, r, v in sorted(unused)]
    return problems


@pytest.fixture(scope="session")
def local_cluster(request: pytest.FixtureRequest) -> Iterator[cluster.Cluster]:
    reap_abandoned(clusters_root())
    workdir = claim_workdir(clusters_root())
    # No CRDs and no operator: these tests are about the harness; tests of the
    # operator install both (cluster.install_crds, cluster.start_operator).
    running = cluster.up(workdir, fleet_spec=FLEET, crds=None, operator=False, log=lambda _m: None)
    try:
        yield running
        whole = ran_the_whole_tier(request.session)
        problems = least_privilege_report(running.layout.audit_log, whole)
    finally:
        cluster.down(workdir, log=lambda _m: None)
        shutil.rmtree(workdir, ignore_errors=True)
    # Least privilege over the whole session (issue 15): whatever the operator's ClusterRole
    # lacks for any test, or grants that the whole suite never used, shows here.
    if problems:
        shown = "\n".join(f"  {p}" for p in problems)
        pytest.fail(f"the operator's ClusterRole is not least privilege:\n{shown}")


@pytest.fixture(scope="session")
def admin(local_cluster: cluster.Cluster) -> KubeApi:
    """The API with admin (system:masters) credentials."""
    return local_cluster.api()


def _namespace_name(test_name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].rstrip("-")
    return f"{slug}-{uuid.uuid4().hex[:6]}"


def _wait_exists(admin: KubeApi, path: str) -> None:
    wait_for(lambda: admin.get_or_none(path), what=f"{path} to exist", timeout=30)


@contextmanager
def fresh_namespace(admin: KubeApi, test_name: str) -> Iterator[str]:
    """A new namespace that pods can be created in at once, deleted on exit."""
    name = _namespace_name(test_name)
    admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # The ServiceAccount admission plugin rejects pods until the SA controller
    # has made `default`; the ServiceAccount volume needs the root CA ConfigMap.
    for kind, obj in (("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")):
        _wait_exists(admin, paths.path(kind, namespace=name, name=obj))
    yield name
    try:
        admin.delete(paths.path("Namespace", name=name))
    except ApiError as err:
        if err.status != 404:
            raise


@pytest.fixture
def namespace(admin: KubeApi, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test."""
    with fresh_namespace(admin, request.node.name) as name:
        yield name


@pytest.fixture(scope="module")
def module_namespace(admin: KubeApi, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace shared by a module's tests (one deployment that several tests read)."""
    with fresh_namespace(admin, Path(str(request.node.path)).stem) as name:
        yield name
