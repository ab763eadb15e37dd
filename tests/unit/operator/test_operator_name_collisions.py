"""An unlabelled object with a wanted name is not taken over (review M4, inverted).

``gather`` lists children by the operator's label, so at 7a48b4a an
unlabelled Service or ConfigMap with a wanted name was invisible and the
server-side apply took it over (and later deleted it with the pool).
"""

from __future__ import annotations

from specdeploy.operator.naming import service_name
from specdeploy.operator.reconcile import reconcile_once
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
