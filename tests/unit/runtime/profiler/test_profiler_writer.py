"""Writing the profile through the Kubernetes API, against a fake API server on 127.0.0.1.

The profiler's pod finds the server and its token as a pod does
(``specdeploy.runtime.kube.config.in_cluster``, pointed at the fake by
``$SPECDEPLOY_KUBE_API``), and every request goes through the shared client.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from specdeploy.cli import main
from specdeploy.runtime.kube.client import Client
from specdeploy.runtime.kube.config import in_cluster
from specdeploy.runtime.kube.requests import Request
from specdeploy.runtime.profiler import writer as writer_module
from specdeploy.runtime.profiler.exit_codes import ExitCode
from specdeploy.runtime.profiler.writer import ApiWriter, access_review, replaced

TOKEN = "s3cret-token"
COLLECTION = "/apis/specdeploy.io/v1alpha1/namespaces/inference/speculationprofiles"
SSAR = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


class FakeApi:
    """Records requests; answers like the API server for the few calls the writer makes."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, Any] | None]] = []
        self.objects: dict[str, dict[str, Any]] = {}
        self.allowed = {"create": True, "get": True, "update": True}
        self.fail_next: list[int] = []
        self.url = ""

    def handle(self, method: str, path: str, auth: str | None, body: Any) -> tuple[int, Any]:
        self.requests.append((method, path, body))
        if auth != f"Bearer {TOKEN}":
            return 401, {"kind": "Status", "message": "Unauthorized"}
        if self.fail_next:
            return self.fail_next.pop(0), {"message": "try later"}
        if path == SSAR and method == "POST":
            verb = body["spec"]["resourceAttributes"]["verb"]
            return 201, {**body, "status": {"allowed": self.allowed[verb]}}
        if path == COLLECTION and method == "POST":
            name = body["metadata"]["name"]
            if name in self.objects:
                return 409, {"message": f"{name} already exists"}
            self.objects[name] = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
            return 201, self.objects[name]
        name = path.rsplit("/", 1)[-1]
        if path == f"{COLLECTION}/{name}" and name in self.objects:
            if method == "GET":
                return 200, self.objects[name]
            if method == "PUT":
                if (
                    body["metadata"].get("resourceVersion")
                    != self.objects[name]["metadata"]["resourceVersion"]
                ):
                    return 409, {"message": "conflict"}
                version = str(int(body["metadata"]["resourceVersion"]) + 1)
                self.objects[name] = {
                    **body,
                    "metadata": {**body["metadata"], "resourceVersion": version},
                }
                return 200, self.objects[name]
        return 404, {"message": "not found"}


@pytest.fixture
def api() -> Iterator[tuple[FakeApi, str]]:
    fake = FakeApi()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            status, answer = fake.handle(
                self.command, self.path, self.headers.get("Authorization"), body
            )
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake, fake.url
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api: tuple[FakeApi, str]) -> FakeApi:
    """Environment of a profiling pod whose service account lives in ``inference``."""
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(TOKEN + "\n")
    (sa / "namespace").write_text("inference")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("SPECDEPLOY_PROFILE_NAMESPACE", raising=False)
    monkeypatch.setenv("SPECDEPLOY_KUBE_API", api[1])
    monkeypatch.setenv("SPECDEPLOY_SERVICEACCOUNT_DIR", str(sa))
    monkeypatch.setenv("SPECDEPLOY_PROFILE_NAME", "p-from-env")
    return api[0]


def _profile(tmp_path: Path, *extra: str) -> int:
    return main(
        [
            "profile",
            "--preset",
            "seed-dense",
            "--batch-sizes",
            "1,8",
            "--steps",
            "8",
            "--termination-log",
            str(tmp_path / "termination-log"),
            *extra,
        ]
    )


def test_in_a_pod_the_profile_is_created_through_the_api(tmp_path: Path, pod: FakeApi) -> None:
    assert _profile(tmp_path) == 0
    methods = [(m, p) for m, p, _ in pod.requests]
    assert methods == [("POST", SSAR)] * 3 + [("POST", COLLECTION)]
    verbs = [b["spec"]["resourceAttributes"] for _, p, b in pod.requests if p == SSAR and b]
    assert {v["verb"] for v in verbs} == {"create", "get", "update"}
    assert all(v["namespace"] == "inference" and v["group"] == "specdeploy.io" for v in verbs)
    body = pod.objects["p-from-env"]
    assert body["apiVersion"] == "specdeploy.io/v1alpha1" and body["kind"] == "SpeculationProfile"
    assert body["metadata"]["namespace"] == "inference"
    assert body["spec"]["source"] == "modelled" and body["spec"]["schedule"]
    assert "status" not in body


def test_an_existing_profile_is_replaced_keeping_its_metadata(tmp_path: Path, pod: FakeApi) -> None:
    pod.objects["p-from-env"] = {
        "metadata": {
            "name": "p-from-env",
            "namespace": "inference",
            "resourceVersion": "7",
            "labels": {"team": "serving"},
            "ownerReferences": [{"kind": "SpeculativeDeployment", "name": "x"}],
        },
        "spec": {"old": True},
    }
    assert _profile(tmp_path) == 0
    tail = [(m, p) for m, p, _ in pod.requests][3:]
    item = f"{COLLECTION}/p-from-env"
    assert tail == [("POST", COLLECTION), ("GET", item), ("PUT", item)]
    stored = pod.objects["p-from-env"]
    assert stored["metadata"]["resourceVersion"] == "8"
    assert stored["metadata"]["labels"] == {"team": "serving", "specdeploy.io/source": "modelled"}
    assert stored["metadata"]["ownerReferences"][0]["name"] == "x"
    assert "old" not in stored["spec"] and stored["spec"]["measurements"]


def test_flags_override_the_environment(tmp_path: Path, pod: FakeApi) -> None:
    # Flags win: a namespace the fake does not serve ends in 404, not in "inference".
    assert _profile(tmp_path, "--name", "mine", "--namespace", "elsewhere") == (
        ExitCode.OUTPUT_REJECTED
    )
    assert any("/namespaces/elsewhere/" in p for _, p, _ in pod.requests)
    assert "is the SpeculationProfile CRD installed?" in (tmp_path / "termination-log").read_text()


def test_missing_rbac_fails_before_profiling(
    tmp_path: Path, pod: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer_module, "ACCESS_PATIENCE_S", 0.0)  # asked once, not for a minute
    pod.allowed["update"] = False
    assert _profile(tmp_path) == ExitCode.OUTPUT_REJECTED
    assert [p for _, p, _ in pod.requests] == [SSAR] * 3  # nothing measured, nothing written
    message = (tmp_path / "termination-log").read_text()
    assert "may not update speculationprofiles.specdeploy.io in namespace inference" in message


def test_a_wrong_token_is_rejected_deterministically(
    tmp_path: Path, pod: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad-token"
    bad.write_text("nope")
    monkeypatch.setenv("SPECDEPLOY_KUBE_TOKEN_FILE", str(bad))
    assert _profile(tmp_path) == ExitCode.OUTPUT_REJECTED
    assert "HTTP 401: Unauthorized" in (tmp_path / "termination-log").read_text()


def test_server_errors_are_retried_then_transient(tmp_path: Path, pod: FakeApi) -> None:
    writer = ApiWriter(_client(pod.url, tmp_path), "inference", sleep=lambda s: None)
    pod.fail_next = [503, 500]
    writer.check_access()  # two failures, then answered
    assert len(pod.requests) == 5
    pod.fail_next = [503] * 10
    with pytest.raises(Exception, match="HTTP 503") as info:
        writer.check_access()
    assert getattr(info.value, "exit_code", ExitCode.TRANSIENT) == ExitCode.TRANSIENT


def test_an_unreachable_server_is_transient(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "namespace").write_text("inference")
    monkeypatch.setenv("SPECDEPLOY_KUBE_API", "http://127.0.0.1:9")  # discard port: refused
    monkeypatch.setenv("SPECDEPLOY_SERVICEACCOUNT_DIR", str(sa))
    monkeypatch.setattr("specdeploy.runtime.profiler.writer.time.sleep", lambda s: None)
    assert _profile(tmp_path) == ExitCode.TRANSIENT


# --- pieces ------------------------------------------------------------------------


def test_replace_keeps_foreign_metadata_and_lets_ours_win() -> None:
    existing = {"metadata": {"name": "p", "resourceVersion": "3", "labels": {"a": "1", "b": "x"}}}
    body = {"kind": "K", "metadata": {"name": "p", "labels": {"b": "2"}}, "spec": {"s": 1}}
    assert replaced(existing, body) == {
        "kind": "K",
        "metadata": {"name": "p", "resourceVersion": "3", "labels": {"a": "1", "b": "2"}},
        "spec": {"s": 1},
    }


def test_access_review_is_a_plain_request_value() -> None:
    request = access_review("ns", "create")
    assert request == Request("POST", SSAR, "access review for create", body=request.body)
    assert request.body["spec"]["resourceAttributes"]["resource"] == "speculationprofiles"


def _client(url: str, tmp_path: Path) -> Client:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    client = in_cluster({"SPECDEPLOY_KUBE_API": url, "SPECDEPLOY_KUBE_TOKEN_FILE": str(token)})
    assert client is not None
    return client


def test_a_modelled_profile_records_the_fingerprint_the_operator_named_it_by(
    tmp_path: Path, pod: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review M12: the operator refuses a profile whose fingerprint names another; the
    sim backend models the preset, but the profile is the pool's, so it carries its key."""
    from specdeploy.runtime.profile import Fingerprint

    wanted = Fingerprint(
        model="meta-llama/Llama-3.1-8B-Instruct",
        method="eagle3",
        draft_model="yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
        gpu_type="NVIDIA-H100-80GB-HBM3",
        gpus_per_replica=1,
        dtype="bfloat16",
        engine="vllm-sim/seed-dense",
        engine_version="0.32.0",
        max_k=5,
    )
    monkeypatch.setenv("SPECDEPLOY_PROFILE_FINGERPRINT", wanted.model_dump_json(by_alias=True))
    assert _profile(tmp_path) == 0
    stored = Fingerprint.model_validate(pod.objects["p-from-env"]["spec"]["fingerprint"])
    assert stored == wanted


def test_a_malformed_fingerprint_in_the_environment_is_invalid_arguments(
    tmp_path: Path, pod: FakeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECDEPLOY_PROFILE_FINGERPRINT", "{not json")
    assert _profile(tmp_path) == ExitCode.INVALID_ARGUMENTS
