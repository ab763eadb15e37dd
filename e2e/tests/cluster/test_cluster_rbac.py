"""The API server enforces RBAC: identities get what their bindings name, nothing more."""

from __future__ import annotations

import pytest

from e2e.localcluster import objects
from e2e.localcluster.kubeapi import ApiError, KubeApi
from specdeploy.runtime.kube import paths


def _as_service_account(admin: KubeApi, namespace: str, name: str) -> KubeApi:
    return admin.with_token(admin.request_token(namespace, name, seconds=600))


def test_a_service_account_without_rights_is_refused(admin: KubeApi, namespace: str) -> None:
    admin.create(objects.service_account("nobody", namespace))
    nobody = _as_service_account(admin, namespace, "nobody")

    with pytest.raises(ApiError) as refused:
        nobody.items(paths.path("Pod", namespace=namespace))

    assert refused.value.status == 403
    assert admin.items(paths.path("Pod", namespace=namespace)) == []


def test_a_role_binding_grants_exactly_what_it_names(admin: KubeApi, namespace: str) -> None:
    admin.create(objects.service_account("reader", namespace))
    admin.create(objects.role("read-configmaps", namespace, ["configmaps"], ["get", "list"]))
    admin.create(
        objects.role_binding(
            "reader", namespace, role_name="read-configmaps", service_account="reader"
        )
    )
    reader = _as_service_account(admin, namespace, "reader")

    names = [
        c["metadata"]["name"] for c in reader.items(paths.path("ConfigMap", namespace=namespace))
    ]
    with pytest.raises(ApiError) as refused:
        reader.items(paths.path("Secret", namespace=namespace))

    assert "kube-root-ca.crt" in names
    assert refused.value.status == 403


def test_a_client_without_credentials_is_refused(admin: KubeApi) -> None:
    anonymous = admin.with_token(None)

    with pytest.raises(ApiError) as refused:
        anonymous.items(paths.path("Namespace"))

    assert refused.value.status in (401, 403)
