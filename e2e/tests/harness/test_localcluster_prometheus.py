"""Prometheus' pure parts: the config, the label contract, the atomic target writer, its wiring."""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import fields
from pathlib import Path

import pytest

from e2e.localcluster import cluster, components, prometheus
from e2e.localcluster.layout import Layout, Ports, State, StateMismatch
from e2e.localcluster.prometheus import ScrapeIntervalError, TargetError, TargetGroup
from specdeploy.operator.builders import common

PORTS = Ports(2379, 2380, 6443, 10257, 10259, 10247, 8080, 9090, 8088, 9401)
POD_LABELS = {
    "specdeploy.io/deployment": "chat",
    "specdeploy.io/pool": "h100",
    "specdeploy.io/profile": "chat-h100-1",
    "app": "ignored",
}


def _config(tmp_path: Path, interval: str = "2s") -> dict[str, object]:
    return prometheus.render_config(
        targets=tmp_path / "targets", self_address="127.0.0.1:9090", interval=interval
    )


def test_the_config_scrapes_prometheus_itself_and_every_json_file_in_the_targets_dir(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}  # type: ignore[attr-defined]

    assert jobs["prometheus"]["static_configs"] == [{"targets": ["127.0.0.1:9090"]}]
    assert jobs["specdeploy-pods"]["file_sd_configs"] == [
        {"files": [f"{tmp_path}/targets/*.json"], "refresh_interval": "1s"}
    ]


def test_the_scrape_timeout_follows_the_interval_so_prometheus_accepts_short_ones(
    tmp_path: Path,
) -> None:
    assert _config(tmp_path, "500ms")["global"] == {
        "scrape_interval": "500ms",
        "scrape_timeout": "500ms",
        "evaluation_interval": "500ms",
    }


def test_the_written_config_is_yaml_that_reads_back_the_same(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "p" / "prometheus.yml"
    prometheus.write_config(path, _config(tmp_path))

    assert yaml.safe_load(path.read_text()) == _config(tmp_path)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({}, "2s", id="default"),
        pytest.param({"SPECDEPLOY_PROMETHEUS_SCRAPE_INTERVAL": ""}, "2s", id="empty-is-default"),
        pytest.param({"SPECDEPLOY_PROMETHEUS_SCRAPE_INTERVAL": " 5s "}, "5s", id="override"),
        pytest.param({"SPECDEPLOY_PROMETHEUS_SCRAPE_INTERVAL": "1m30s"}, "1m30s", id="compound"),
    ],
)
def test_the_scrape_interval_comes_from_the_environment(
    environ: dict[str, str], expected: str
) -> None:
    assert prometheus.scrape_interval(environ) == expected


@pytest.mark.parametrize("bad", ["fast", "2", "0s", "-1s", "2 s", "1.5s"])
def test_a_scrape_interval_prometheus_would_refuse_is_rejected_by_name(bad: str) -> None:
    with pytest.raises(ScrapeIntervalError, match="SPECDEPLOY_PROMETHEUS_SCRAPE_INTERVAL"):
        prometheus.scrape_interval({"SPECDEPLOY_PROMETHEUS_SCRAPE_INTERVAL": bad})


def test_a_serving_pod_gets_a_vllm_and_an_addon_group_with_the_contract_labels() -> None:
    groups = prometheus.pod_target_groups(
        "team-a", "chat-7f9", POD_LABELS, api="127.0.0.1:41000", addon="127.0.0.1:41001"
    )
    common_labels = {
        "namespace": "team-a",
        "pod": "chat-7f9",
        "specdeploy_deployment": "chat",
        "specdeploy_pool": "h100",
        "specdeploy_profile": "chat-h100-1",
    }

    assert [g.document() for g in groups] == [
        {"targets": ["127.0.0.1:41000"], "labels": {"job": "vllm", **common_labels}},
        {"targets": ["127.0.0.1:41001"], "labels": {"job": "specdeploy-addon", **common_labels}},
    ]


def test_a_pod_without_a_profile_label_has_no_profile_target_label() -> None:
    labels = {k: v for k, v in POD_LABELS.items() if k != "specdeploy.io/profile"}

    assert "specdeploy_profile" not in prometheus.pod_labels("ns", "p", labels)


@pytest.mark.parametrize("dropped", ["specdeploy.io/deployment", "specdeploy.io/pool"])
def test_a_pod_without_its_deployment_or_pool_label_is_refused(dropped: str) -> None:
    labels = {k: v for k, v in POD_LABELS.items() if k != dropped}

    with pytest.raises(TargetError, match=dropped):
        prometheus.pod_labels("ns", "p", labels)


def test_the_pod_label_keys_are_the_ones_the_operator_sets() -> None:
    assert set(prometheus.POD_LABELS) == {
        common.DEPLOYMENT_LABEL,
        common.POOL_LABEL,
        common.PROFILE_LABEL,
        common.REFERENCE_LABEL,
    }


@pytest.mark.parametrize(
    ("targets", "labels"),
    [
        pytest.param(("http://127.0.0.1:80",), {}, id="url-not-address"),
        pytest.param(("127.0.0.1",), {}, id="no-port"),
        pytest.param(("127.0.0.1:70000",), {}, id="port-out-of-range"),
        pytest.param(("127.0.0.1:0",), {}, id="port-zero"),
        pytest.param("127.0.0.1:80", {}, id="a-string-not-a-sequence"),
        pytest.param(("127.0.0.1:80",), {"specdeploy.io/pool": "x"}, id="pod-label-not-target"),
    ],
)
def test_a_group_prometheus_would_misread_is_refused(
    targets: tuple[str, ...], labels: dict[str, str]
) -> None:
    with pytest.raises(TargetError):
        TargetGroup(targets, labels)


def test_targets_are_written_as_file_sd_json_and_removed(tmp_path: Path) -> None:
    group = TargetGroup(("127.0.0.1:8000",), {"job": "vllm"})

    path = prometheus.write_targets(tmp_path / "targets", "ns.pod-a", [group])
    written = json.loads(path.read_text())
    removed, again = (prometheus.remove_targets(tmp_path / "targets", "ns.pod-a") for _ in "12")

    assert path == tmp_path / "targets" / "ns.pod-a.json"
    assert written == [{"targets": ["127.0.0.1:8000"], "labels": {"job": "vllm"}}]
    assert (removed, again) == (True, False)
    assert list((tmp_path / "targets").iterdir()) == []


def test_a_rewrite_replaces_the_file_whole_by_a_rename_from_a_hidden_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "targets"
    old = TargetGroup(("127.0.0.1:8000",), {"job": "vllm"})
    new = TargetGroup(("127.0.0.1:9000",), {"job": "vllm"})
    path = prometheus.write_targets(directory, "pod", [old])
    seen: list[tuple[str, bool, str]] = []
    real_replace = os.replace

    def spy(src: str | Path, dst: str | Path) -> None:
        # What Prometheus could read at this moment: the old file, whole.
        seen.append((Path(src).name, fnmatch.fnmatch(Path(src).name, "*.json"), path.read_text()))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    prometheus.write_targets(directory, "pod", [new])

    ((temp_name, temp_matches_pattern, visible_before),) = seen
    assert temp_name.startswith(".") and not temp_matches_pattern
    assert json.loads(visible_before)[0]["targets"] == ["127.0.0.1:8000"]
    assert json.loads(path.read_text())[0]["targets"] == ["127.0.0.1:9000"]
    assert [p.name for p in directory.iterdir()] == ["pod.json"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "targets"
    path = prometheus.write_targets(directory, "pod", [TargetGroup(("127.0.0.1:8000",))])
    before = path.read_text()

    def full_disk(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space"):
        prometheus.write_targets(directory, "pod", [TargetGroup(("127.0.0.1:9000",))])

    assert path.read_text() == before
    assert [p.name for p in directory.iterdir()] == ["pod.json"]


@pytest.mark.parametrize("name", ["", "../escape", "a/b", ".hidden", "x y"])
def test_a_target_file_name_that_could_escape_or_hide_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(TargetError):
        prometheus.write_targets(tmp_path, name, [])
    with pytest.raises(TargetError):
        prometheus.remove_targets(tmp_path, name)


def test_the_targets_dir_is_under_the_workdir() -> None:
    assert prometheus.targets_dir(Layout(Path("/w"))) == Path("/w/prometheus/targets")


def test_prometheus_listens_on_loopback_keeps_its_store_in_the_workdir_and_bounds_it() -> None:
    component = components.prometheus(Path("/bin/prometheus"), Layout(Path("/w")), PORTS)

    assert component.ready_url == "http://127.0.0.1:9090/-/ready"
    assert "--web.listen-address=127.0.0.1:9090" in component.argv
    assert "--config.file=/w/prometheus/prometheus.yml" in component.argv
    assert "--storage.tsdb.path=/w/prometheus/data" in component.argv
    assert any(a.startswith("--storage.tsdb.retention.size=") for a in component.argv)


def test_free_ports_include_one_for_prometheus_and_the_gateway_and_are_distinct() -> None:
    ports = Ports.pick()

    assert len(set(vars(ports).values())) == len(vars(ports)) == len(fields(Ports))
    assert ports.prometheus > 0 and ports.gateway > 0


def test_the_state_records_the_prometheus_url(tmp_path: Path) -> None:
    state = State(PORTS, "a100=1", "https://127.0.0.1:6443")
    state.save(tmp_path / "cluster.json")

    assert State.load(tmp_path / "cluster.json") == state
    assert json.loads((tmp_path / "cluster.json").read_text())["prometheus_url"] == (
        "http://127.0.0.1:9090"
    )


def test_a_state_from_a_harness_without_prometheus_is_a_mismatch_not_a_crash(
    tmp_path: Path,
) -> None:
    old = {k: v for k, v in vars(PORTS).items() if k != "prometheus"}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"ports": old, "fleet": "a100=1", "server": "https://x"}))

    with pytest.raises(StateMismatch, match="prometheus"):
        State.load(path)


def test_the_operator_serves_metrics_on_its_own_loopback_port_scraped_as_its_own_job(
    tmp_path: Path,
) -> None:
    argv = cluster.operator_component(Layout(Path("/w")), PORTS).argv
    path = prometheus.write_targets(
        tmp_path, prometheus.OPERATOR_TARGETS, prometheus.operator_target_groups("127.0.0.1:9401")
    )

    assert "--metrics-port=9401" in argv and "--metrics-addr=127.0.0.1" in argv
    assert f"--liveness=http://127.0.0.1:{PORTS.operator}/healthz" in argv
    assert json.loads(path.read_text()) == [
        {"targets": ["127.0.0.1:9401"], "labels": {"job": "specdeploy-operator"}}
    ]
    # A pod's file is <namespace>_<pod>: a namespace name has no underscore, so none collides.
    assert "_" not in prometheus.OPERATOR_TARGETS
