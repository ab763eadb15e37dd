"""An unlabelled object with a wanted name is not taken over (review M4, inverted).

``gather`` lists children by the operator's label, so at 7a48b4a an
unlabelled Service or ConfigMap with a wanted name was invisible and the
server-side apply took it over (and later deleted it with the pool).
"""

from __future__ import annotations

from specdeploy.operator.naming import service_name
from specdeploy.operator.reactor.reconcile import reconcile_once
from tests.unit.operator.test_operator_k8s import NS, cluster, create_example

H100 = "NVIDIA-H100-80GB-HBM3"
NOW = "2026-01-01T00:00:00Z"


def test_a_foreign_service_with_the_models_name_is_left_alone_and_reported() -> None:
    api = cluster(H100)
    name = service_name("llama-8b-chat")
    foreign = {"metadata": {"name": name, "namespace": NS}, "spec": {"selector": {"app": "mine"}}}
    api.put("services", foreign)
    create_example(api)
    reconcile_once(api, NS, "llama-8b-chat", clock=lambda: NOW)
    service = api.get("services", name)
    assert service["spec"] == {"selector": {"app": "mine"}}, "not taken over"
    assert "ownerReferences" not in service["metadata"]
    writes = [(m, p) for m, p in api.requests if m != "GET" and f"/services/{name}" in p]
    assert writes == []
    status = api.get("speculativedeployments", "llama-8b-chat")["status"]
    assert status.get("endpoint") is None
    (applied,) = [c for c in status["conditions"] if c["type"] == "Applied"]
    assert (applied["status"], applied["reason"]) == ("False", "NameTaken")
    assert f"Service {name} exists and does not belong" in applied["message"]


def test_a_shared_job_created_meanwhile_by_another_deployment_is_joined_not_ignored() -> None:
    """Review M4/H1.4: a POST answered 409 counted as success, so a deployment that lost
    the race to create its fingerprint's Job never became one of its owners."""
    import pytest

    from specdeploy.operator.clients import k8s
    from tests.unit.operator.test_operator_k8s import FakeApi

    class Racing(FakeApi):
        """Another deployment's reconcile creates the Job between our list and our POST."""

        raced = False

        def request(self, method: str, path: str, **kwargs: object) -> dict[str, object]:
            if method == "POST" and path.endswith("/jobs") and not self.raced:
                self.raced = True
                body = kwargs["body"]
                assert isinstance(body, dict)
                theirs = {**body, "metadata": {**body["metadata"]}}
                theirs["metadata"]["ownerReferences"] = [
                    {**body["metadata"]["ownerReferences"][0], "name": "other", "uid": "uid-o"}
                ]
                self.put("jobs", theirs)
            return super().request(method, path, **kwargs)  # type: ignore[arg-type]

    api = Racing()
    api.objects.update(cluster(H100).objects)
    create_example(api)
    with pytest.raises(k8s.RetryLater):
        reconcile_once(api, NS, "llama-8b-chat", clock=lambda: NOW)
    reconcile_once(api, NS, "llama-8b-chat", clock=lambda: NOW)
    (job,) = api.of("jobs")
    owners = sorted(r["name"] for r in job["metadata"]["ownerReferences"])
    assert owners == ["llama-8b-chat", "other"]
