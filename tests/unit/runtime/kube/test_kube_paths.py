"""The one kind table and the values built from it: REST paths, requests, answers."""

from __future__ import annotations

import pytest

from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.requests import Response


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("Pod", "ns", "p"), "/api/v1/namespaces/ns/pods/p"),
        (("Pod",), "/api/v1/pods"),
        (("Deployment", "ns"), "/apis/apps/v1/namespaces/ns/deployments"),
        (("Job", "ns", "j"), "/apis/batch/v1/namespaces/ns/jobs/j"),
        (("ServiceAccount", "ns", "sa", "token"), "/api/v1/namespaces/ns/serviceaccounts/sa/token"),
        (("Node", "ignored", "n0"), "/api/v1/nodes/n0"),
        (("SelfSubjectAccessReview",), "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
        (
            ("SpeculativeDeployment", "ns", "d", "status"),
            "/apis/specdeploy.io/v1alpha1/namespaces/ns/speculativedeployments/d/status",
        ),
        (
            ("SpeculationProfile", "ns"),
            "/apis/specdeploy.io/v1alpha1/namespaces/ns/speculationprofiles",
        ),
    ],
    ids=[
        "core-object",
        "core-collection-across-namespaces",
        "group-collection",
        "group-object",
        "subresource",
        "cluster-scoped-ignores-the-namespace",
        "cluster-scoped-collection",
        "our-deployment-status",
        "our-profiles",
    ],
)
def test_a_path_comes_from_the_kind_table(args: tuple[str, ...], expected: str) -> None:
    assert paths.path(*args) == expected


def test_manifests_give_their_object_and_collection_paths() -> None:
    manifest = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "r", "namespace": "ns"},
    }
    assert paths.object_path(manifest) == "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles/r"
    assert (
        paths.collection_path(manifest) == "/apis/rbac.authorization.k8s.io/v1/namespaces/ns/roles"
    )
    listed = {
        "kind": "Namespace",
        "metadata": {"name": "ml"},
    }  # items of a List carry no apiVersion
    assert paths.object_path(listed) == "/api/v1/namespaces/ml"


def test_a_manifest_of_another_version_than_the_table_is_refused() -> None:
    manifest = {"apiVersion": "batch/v1beta1", "kind": "Job", "metadata": {"name": "j"}}
    with pytest.raises(ValueError, match="batch/v1, not batch/v1beta1"):
        paths.object_path(manifest)


def test_an_unknown_kind_names_the_table_to_add_it_to() -> None:
    with pytest.raises(KeyError, match=r"kube\.paths\.KINDS"):
        paths.path("Ingress", "ns")


@pytest.mark.parametrize(
    ("raw", "body", "message"),
    [
        (
            b'{"kind": "Status", "message": "denied"}',
            {"kind": "Status", "message": "denied"},
            "HTTP 403: denied",
        ),
        (b"<html>proxy</html>", {"message": "<html>proxy</html>"}, "HTTP 403: <html>proxy</html>"),
        (b"[1, 2]", {}, "HTTP 403"),
        (b"", {}, "HTTP 403"),
    ],
    ids=["status-object", "not-json", "json-but-no-object", "empty"],
)
def test_an_answer_decodes_leniently(raw: bytes, body: dict[str, str], message: str) -> None:
    response = Response.of(403, raw)
    assert (response.body, response.message(), response.ok) == (body, message, False)
