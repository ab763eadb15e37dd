"""The kubelet stand-in: runs fake nodes' pods locally, then ends them through KWOK.

KWOK nodes run no containers. Every pod the operator puts on a fake GPU node
does here what it would do on that GPU (``emulation``: profiling pods run
the profiler on the simulator for the node's GPU type, serving pods the
emulated vLLM server); the chart's own pods (``specdeploy operator ...``: the
operator and its CRD-upgrade hook) run their command on whichever fake node
the scheduler chose - the emulation of a kubelet running that container, as
that pod's ServiceAccount; and a pod with the annotation
``specdeploy.io/run-locally: "true"`` runs its own command. Once KWOK has
made such a pod Running on a fake node, this process does what a kubelet would:

1. writes the volumes the containers mount under ``<workdir>/pods/<pod>/``
   (ConfigMaps, Secrets, downward API, and the ServiceAccount volume with a
   token from the TokenRequest API bound to the pod - so RBAC applies to
   whatever the command does with it);
2. resolves each container's env (``podenv``) and adds the in-cluster
   variables: ``KUBERNETES_SERVICE_HOST/PORT`` pointing at the local API
   server, and ``KUBECONFIG`` - a kubeconfig that uses the pod's token file and
   the cluster CA, because in-cluster loaders read fixed paths under
   /var/run/secrets that a local process cannot have;
3. runs ``command + args`` as a subprocess with mount paths rewritten to the
   local directories (``SPECDEPLOY_LOCAL_MOUNTS`` has the mapping), stdout and
   stderr to ``<workdir>/pods/<pod>/<container>.log``;
4. when all containers have exited, sets ``specdeploy.io/exit-code`` (first
   non-zero code, else 0) and ``specdeploy.io/termination-message`` (the
   termination-message file, or the log tail under FallbackToLogsOnError);
   KWOK's pod-exit stage then writes the container statuses and phase.

A serving pod's process gets loopback ports for its container ports; they
are published on the pod (``emulation.LOCAL_HTTP``, read by the gateway) and
as Prometheus file-discovery targets while the pod runs. An operator pod's
metrics and liveness ports are moved to loopback ports the same way; its
metrics port is published on the pod (``LOCAL_METRICS``) and to Prometheus
as job ``specdeploy-operator`` (what the chart's PodMonitor scrapes in a real
cluster).

A serving pod is Running but not Ready until its readiness probe passes: the
stand-in asks the probe's path on the pod's loopback port each poll, as a
kubelet would, and sets ``stages.PROBE_PASSED`` once it answers; KWOK then
marks the pod Ready. A rollout therefore keeps the old pod serving while the
new one loads (``maxUnavailable: 0``), as on a real cluster.

With ``--serving=kwok`` (``SERVING_BY_KWOK``) serving pods are left to KWOK alone,
which marks them Running and Ready as it does any pod: no emulated vLLM process,
no metrics, no traffic. That is for a fleet benchmark with hundreds of serving
pods on a small machine, which measures the control plane, not the pods; it
changes the cluster's emulation only, never what a spec asks. Profiling pods
(few: one per fingerprint) still run the profiler here.

A pod deleted while its command runs has the command's process group stopped after
its preStop sleep (capped at ``PRE_STOP_CAP_SECONDS``): SIGTERM, then SIGKILL after the grace.
The stand-in lists pods every ``POLL`` seconds instead of watching: a local
test cluster has few pods, and a poll cannot miss an event.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from e2e.localcluster import (
    emulation,
    kubeconfig,
    podenv,
    probes,
    prometheus,
    real_vllm,
    stages,
)
from e2e.localcluster import volumes as volumes_mod
from e2e.localcluster.emulation import Kind
from e2e.localcluster.fleet import KWOK_ANNOTATION
from e2e.localcluster.kubeapi import ApiError, KubeApi
from e2e.localcluster.podenv import PodConfigError
from e2e.localcluster.volumes import materialize_mounts
from specdeploy.runtime.kube import paths

Obj = dict[str, Any]
POLL = 0.3
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
DEFAULT_TERMINATION_PATH = "/dev/termination-log"
# What a failed set-up reports as the pod's exit code (the kubelet's
# CreateContainerConfigError has no code; the pod must still end for a test).
CONFIG_ERROR_CODE = 128
READY_FILE = "kubelet-standin.ready"
MAX_GRACE_SECONDS = 60
PRE_STOP_CAP_SECONDS = 2.0
"""The longest preStop sleep the stand-in waits before SIGTERM. The sleep is there for
endpoints to drop the pod first; here that takes at most the gateway's refresh
(``gateway.REFRESH_SECONDS``, 1 s), and a spec's 15 s would only slow tests down."""
SERVING_EMULATED = "emulate"
SERVING_BY_KWOK = "kwok"
SERVING_MODES = (SERVING_EMULATED, SERVING_BY_KWOK)
"""How serving pods are played: an emulated vLLM process each, or KWOK's Ready alone."""
NOT_SERVING = "!=".join(stages.PROBED_LABEL)
"""With serving pods left to KWOK, the poll lists only the others (a fleet has many)."""
VOLUME_SYNC_SECONDS = 2.0
"""How often mounted ConfigMaps and Secrets are re-read (the kubelet's sync is ~1 min;
a test cluster wants table pushes to arrive in seconds)."""
REPO_ROOT = Path(__file__).resolve().parents[2]
"""The checkout: the emulated server is dev code (``e2e/``), importable from here only."""


class TargetSink(Protocol):
    """Where a running serving pod's metrics endpoints are announced (Prometheus)."""

    def publish(self, pod: Mapping[str, Any], ports: emulation.Ports) -> None: ...

    def withdraw(self, pod: Mapping[str, Any]) -> None: ...

    def publish_operator(self, pod: Mapping[str, Any], address: str) -> None: ...


class PrometheusTargets:
    """A serving pod's two metrics endpoints as Prometheus file-discovery targets
    (``prometheus.pod_target_groups``: the label contract), one file per pod."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @staticmethod
    def _name(pod: Mapping[str, Any]) -> str:
        meta = pod["metadata"]
        return f"{meta['namespace']}_{meta['name']}"

    def publish(self, pod: Mapping[str, Any], ports: emulation.Ports) -> None:
        meta = pod["metadata"]
        groups = prometheus.pod_target_groups(
            meta["namespace"],
            meta["name"],
            meta.get("labels") or {},
            api=f"127.0.0.1:{ports.http}",
            addon=f"127.0.0.1:{ports.metrics}",
        )
        prometheus.write_targets(self.directory, self._name(pod), groups)

    def publish_operator(self, pod: Mapping[str, Any], address: str) -> None:
        """An operator pod's ``/metrics``: job ``specdeploy-operator``, with its pod's name."""
        meta = pod["metadata"]
        (group,) = prometheus.operator_target_groups(address)
        labels = {**group.labels, "namespace": meta["namespace"], "pod": meta["name"]}
        groups = [prometheus.TargetGroup(group.targets, labels)]
        prometheus.write_targets(self.directory, self._name(pod), groups)

    def withdraw(self, pod: Mapping[str, Any]) -> None:
        prometheus.remove_targets(self.directory, self._name(pod))


class ApiObjects:
    """ObjectSource and TokenSource over the admin API client."""

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def config_map(self, namespace: str, name: str) -> Obj | None:
        return self.api.get_or_none(paths.path("ConfigMap", namespace=namespace, name=name))

    def secret(self, namespace: str, name: str) -> Obj | None:
        return self.api.get_or_none(paths.path("Secret", namespace=namespace, name=name))

    def pod_token(self, pod: Mapping[str, Any], audience: str | None, seconds: int) -> str:
        meta = pod["metadata"]
        return self.api.request_token(
            meta["namespace"],
            pod["spec"].get("serviceAccountName", "default"),
            audiences=[audience] if audience else None,
            seconds=max(seconds, 600),
            bound_pod=pod,
        )


@dataclass
class PodRun:
    """The local processes of one pod."""

    pod: Obj
    root: Path
    kind: Kind = Kind.AS_IS
    gpu: str = ""
    """The node's GPU product."""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    termination_files: dict[str, Path] = field(default_factory=dict)
    ports: emulation.Ports | None = None
    """A serving pod's loopback ports (published on the pod and to Prometheus)."""
    operator_metrics: str | None = None
    """An operator pod's ``/metrics`` address on the loopback, when it serves one."""
    synced: dict[str, str] = field(default_factory=dict)
    """ConfigMap/Secret volume directory -> the digest of the data it holds."""
    probe_passed: bool = False
    """Whether the pod's readiness probe has passed once (``stages.PROBE_PASSED`` set)."""

    @property
    def key(self) -> str:
        return str(self.pod["metadata"]["uid"])

    def done(self) -> bool:
        return all(p.poll() is not None for p in self.processes.values())


@dataclass
class Stopping:
    """A pod's processes on their way out: SIGTERM at ``term_at``, SIGKILL at ``kill_at``."""

    run: PodRun
    term_at: float
    kill_at: float
    termed: bool = False


def _pod_dir(pods_dir: Path, pod: Mapping[str, Any]) -> Path:
    meta = pod["metadata"]
    return pods_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"


class StandIn:
    """One poll loop over the cluster's pods; ``step`` is one iteration."""

    def __init__(
        self,
        api: KubeApi,
        *,
        pods_dir: Path,
        marker: str,
        targets: TargetSink | None = None,
        serving: str = SERVING_EMULATED,
    ) -> None:
        if serving not in SERVING_MODES:
            raise ValueError(f"serving mode {serving!r}: want one of {', '.join(SERVING_MODES)}")
        self.api = api
        self.serving = serving
        self.objects = ApiObjects(api)
        self.pods_dir = pods_dir
        self.marker = marker
        self.runs: dict[str, PodRun] = {}
        self.seen: set[str] = set()
        self.fake_nodes: dict[str, str] = {}
        """Fake node -> its GPU product ('' for a node without one)."""
        self.targets = targets
        self.terminating: list[Stopping] = []
        self._last_sync = time.monotonic()
        self._real: tuple[Path, Path] | None = None

    def step(self) -> None:
        query = {"fieldSelector": "status.phase=Running"}
        if self.serving == SERVING_BY_KWOK:
            query["labelSelector"] = NOT_SERVING
        pods = self.api.items(paths.path("Pod"), **query)
        live = {p["metadata"]["uid"]: p for p in pods if not p["metadata"].get("deletionTimestamp")}
        for pod in live.values():
            if self._wanted(pod):
                self.seen.add(pod["metadata"]["uid"])
                self._start(pod)
        for run in self.runs.values():
            if not run.probe_passed:
                self._probe(run)
        for uid, run in list(self.runs.items()):
            if uid not in live:
                self._stop(run)
                del self.runs[uid]
            elif run.done():
                self._withdraw(run)
                self._report(run)
                del self.runs[uid]
        self._reap()
        if time.monotonic() - self._last_sync >= VOLUME_SYNC_SECONDS:
            self._last_sync = time.monotonic()
            for run in self.runs.values():
                self._sync_volumes(run)

    def _sync_volumes(self, run: PodRun) -> None:
        """Bring the pod's mounted ConfigMaps and Secrets up to date, as the kubelet's
        periodic sync does (a failed read leaves the last version in place)."""
        volumes = {v["name"]: v for v in run.pod["spec"].get("volumes", [])}
        for name, volume in volumes.items():
            directory = run.root / "volumes" / name
            if volumes_mod.object_volume_kind(volume) is None or not directory.is_dir():
                continue
            try:
                run.synced[name] = volumes_mod.refresh_object_volume(
                    directory, run.pod, volume, self.objects, run.synced.get(name)
                )
            except (ApiError, OSError, PodConfigError) as err:
                print(f"kubelet stand-in: volume {name}: {err}", file=sys.stderr, flush=True)

    def _wanted(self, pod: Obj) -> bool:
        meta = pod["metadata"]
        annotations = meta.get("annotations", {})
        kind = emulation.kind_of(pod)
        return (
            stages.EXIT_CODE not in annotations
            and meta["uid"] not in self.seen
            and self._is_fake(pod["spec"].get("nodeName", ""))
            and kind is not Kind.NONE
            and not (kind is Kind.SERVING and self.serving == SERVING_BY_KWOK)
        )

    def _is_fake(self, node: str) -> bool:
        if node and node not in self.fake_nodes:
            found = self.api.get_or_none(paths.path("Node", name=node)) or {}
            key, value = KWOK_ANNOTATION
            if found.get("metadata", {}).get("annotations", {}).get(key) == value:
                self.fake_nodes[node] = emulation.gpu_product(found)
        return node in self.fake_nodes

    def _start(self, pod: Obj) -> None:
        kind = emulation.kind_of(pod)
        gpu = self.fake_nodes.get(pod["spec"].get("nodeName", ""), "")
        run = PodRun(pod, _pod_dir(self.pods_dir, pod), kind=kind, gpu=gpu)
        self.runs[run.key] = run
        try:
            if emulation.needs_gpu(kind) and not gpu:
                raise ValueError(
                    f"node {pod['spec'].get('nodeName')} has no {emulation.GPU_PRODUCT_LABEL} label"
                )
            for container in pod["spec"]["containers"]:
                self._start_container(run, container)
            if run.ports is not None:
                self._publish(run)
            if run.operator_metrics is not None:
                self._publish_operator(run)
        # PodConfigError and RealVllmUnavailable included
        except (ValueError, KeyError, ApiError, OSError, RuntimeError) as err:
            self._stop(run)
            del self.runs[run.key]
            message = f"kubelet stand-in: {err}"
            self._annotate(pod, stages.exit_annotations(CONFIG_ERROR_CODE, message))

    def _publish(self, run: PodRun) -> None:
        """The serving pod's loopback ports: on the pod (the gateway) and to Prometheus."""
        assert run.ports is not None
        pid = next(iter(run.processes.values())).pid
        meta = run.pod["metadata"]
        path = paths.path("Pod", namespace=meta["namespace"], name=meta["name"])
        patch = {"metadata": {"annotations": emulation.local_annotations(run.ports, pid)}}
        self.api.merge_patch(path, patch)
        if self.targets is not None:
            self.targets.publish(run.pod, run.ports)

    def _probe(self, run: PodRun) -> None:
        """A serving pod's readiness probe, as a kubelet runs it until it first passes;
        then ``PROBE_PASSED`` on the pod, and KWOK marks it Ready (``kwok-stages.yaml``).
        A pod whose Ready KWOK does not hold back, or without an HTTP probe, passes at once."""
        path = probes.readiness_path(run.pod)
        if stages.probe_gated(run.pod) and run.ports is not None and path is not None:
            if not probes.http_probe(f"127.0.0.1:{run.ports.http}", path):
                return
            self._annotate(run.pod, {stages.PROBE_PASSED: "true"})
        run.probe_passed = True

    def _publish_operator(self, run: PodRun) -> None:
        """The operator pod's metrics port: on the pod and to Prometheus (``publish_operator``)."""
        assert run.operator_metrics is not None
        pid = next(iter(run.processes.values())).pid
        meta = run.pod["metadata"]
        path = paths.path("Pod", namespace=meta["namespace"], name=meta["name"])
        annotations = {emulation.LOCAL_METRICS: run.operator_metrics, emulation.LOCAL_PID: str(pid)}
        self.api.merge_patch(path, {"metadata": {"annotations": annotations}})
        if self.targets is not None:
            self.targets.publish_operator(run.pod, run.operator_metrics)

    def _withdraw(self, run: PodRun) -> None:
        published = run.ports is not None or run.operator_metrics is not None
        if published and self.targets is not None:
            self.targets.withdraw(run.pod)

    def _stop(self, run: PodRun) -> None:
        """The kubelet's termination: the preStop sleep (``_pre_stop_seconds``), then
        SIGTERM, then SIGKILL once the pod's grace has passed, all from ``_reap``: a
        serving server drains in-flight requests on SIGTERM, and the loop must not wait
        on it. The sleep keeps the server answering while the gateway still lists the
        pod, as the preStop sleep does while a real cluster's endpoints catch up."""
        self._withdraw(run)
        now = time.monotonic()
        stopping = Stopping(run, now + _pre_stop_seconds(run.pod), now + _grace_seconds(run.pod))
        self.terminating.append(stopping)
        self._reap()

    def _reap(self) -> None:
        left = []
        now = time.monotonic()
        for stopping in self.terminating:
            run = stopping.run
            if run.done():
                continue
            if not stopping.termed and now >= stopping.term_at:
                _signal(run, signal.SIGTERM)
                stopping.termed = True
            if now >= stopping.kill_at:
                _signal(run, signal.SIGKILL)
            left.append(stopping)
        self.terminating = left

    def _start_container(self, run: PodRun, container: Obj) -> None:
        name = container["name"]
        mounts = materialize_mounts(run.root, run.pod, container, self.objects, self.objects)
        termination = run.root / "termination" / name
        termination.parent.mkdir(parents=True, exist_ok=True)
        termination.touch()
        mounts[container.get("terminationMessagePath", DEFAULT_TERMINATION_PATH)] = str(termination)
        env = self._environment(run, container, mounts)
        argv = [podenv.rewrite_paths(a, mounts) for a in podenv.command_line(container, env)]
        argv = self._emulated(run, argv, env)
        workdir = podenv.rewrite_paths(container.get("workingDir", ""), mounts)
        cwd = Path(workdir) if workdir and Path(workdir).is_dir() else run.root
        with (run.root / f"{name}.log").open("ab") as log:
            run.processes[name] = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        run.termination_files[name] = termination

    def _emulated(self, run: PodRun, argv: list[str], env: dict[str, str]) -> list[str]:
        """The command line the pod's kind runs on this node's emulated GPU (``emulation``)."""
        if run.kind is Kind.PROFILER and argv[:2] == ["specdeploy", "profile"]:
            return ["specdeploy", *emulation.profiler_args(argv[1:], run.gpu)]
        if run.kind is Kind.OPERATOR and argv[:2] == ["specdeploy", "operator"]:
            # The container's own command (the kubelet's job), its ports moved to loopback.
            ports = emulation.Ports(_free_port(), _free_port())
            args = emulation.operator_args(argv[1:], ports)
            if emulation.operator_metrics_on(args):
                run.operator_metrics = f"127.0.0.1:{ports.metrics}"
            return ["specdeploy", *args]
        if run.kind is Kind.SERVING and argv[:2] == ["vllm", "serve"]:
            run.ports = emulation.Ports(_free_port(), _free_port())
            env.update(emulation.serving_env(run.ports, run.gpu))
            if real_vllm.configured_gpu(self.pods_dir.parent) == run.gpu:
                python, model = self._real_engine()
                env.update(real_vllm.environment(python))
                return real_vllm.command(argv[2:], run.ports, python, model)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
            )
            return emulation.serving_argv(argv[2:], run.ports)
        return argv

    def _real_engine(self) -> tuple[Path, Path]:
        """The vLLM CPU venv's python and the SmolLM2 checkpoint (looked up once)."""
        if self._real is None:
            python = real_vllm.vllm_python()
            self._real = (python, real_vllm.checkpoint(python))
        return self._real

    def _environment(self, run: PodRun, container: Obj, mounts: dict[str, str]) -> dict[str, str]:
        pod_env = podenv.resolve_env(run.pod, container, self.objects)
        env = {k: podenv.rewrite_paths(v, mounts) for k, v in pod_env.items()}
        host = self.api.credentials().server.split("://", 1)[1]
        address, _, port = host.rpartition(":")
        env.update(
            {
                "KUBERNETES_SERVICE_HOST": address,
                "KUBERNETES_SERVICE_PORT": port,
                "KUBERNETES_SERVICE_PORT_HTTPS": port,
                "SPECDEPLOY_POD_ROOT": str(run.root),
                **podenv.mounts_env(mounts),
            }
        )
        if SA_MOUNT in mounts:
            env["KUBECONFIG"] = str(self._pod_kubeconfig(run, Path(mounts[SA_MOUNT])))
        return {**_host_env(), **env, "SPECDEPLOY_CLUSTER_WORKDIR": self.marker}

    def _pod_kubeconfig(self, run: PodRun, sa_dir: Path) -> Path:
        meta = run.pod["metadata"]
        doc = kubeconfig.document(
            server=self.api.credentials().server,
            ca_file=sa_dir / "ca.crt",
            user=f"system:serviceaccount:{meta['namespace']}:"
            f"{run.pod['spec'].get('serviceAccountName', 'default')}",
            token_file=sa_dir / "token",
            namespace=meta["namespace"],
        )
        return kubeconfig.write(run.root / "kubeconfig", doc)

    def _report(self, run: PodRun) -> None:
        code, message = 0, ""
        for container in run.pod["spec"]["containers"]:
            name = container["name"]
            returncode = run.processes[name].returncode
            # A signal death reads as 128 + signal, as a container runtime reports it.
            exit_code = returncode if returncode >= 0 else 128 - returncode
            text = run.termination_files[name].read_text(errors="replace")
            if not text and exit_code and _falls_back(container):
                text = _tail(run.root / f"{name}.log")
            if exit_code and not code:
                code, message = exit_code, text
            elif not code and not message:
                message = text
        self._annotate(run.pod, stages.exit_annotations(code, message))

    def _annotate(self, pod: Obj, annotations: Mapping[str, str]) -> None:
        """The harness's annotations on the pod (a pod already gone is left alone)."""
        meta = pod["metadata"]
        path = paths.path("Pod", namespace=meta["namespace"], name=meta["name"])
        patch = {"metadata": {"annotations": dict(annotations)}}
        try:
            self.api.merge_patch(path, patch)
        except ApiError as err:
            if err.status != 404:
                raise

    def shutdown(self) -> None:
        for run in self.runs.values():
            self._withdraw(run)
        _kill([*self.runs.values(), *(stopping.run for stopping in self.terminating)])
        self.runs.clear()
        self.terminating.clear()


def _host_env() -> dict[str, str]:
    """What the local process needs from the host: the venv's python first on PATH."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    keep = {k: os.environ[k] for k in ("HOME", "LANG", "TMPDIR") if k in os.environ}
    return {**keep, "PATH": path}


def _falls_back(container: Mapping[str, Any]) -> bool:
    return container.get("terminationMessagePolicy") == "FallbackToLogsOnError"


def _tail(log: Path, lines: int = 80) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])[-2048:]
    except OSError:
        return ""


def _grace_seconds(pod: Mapping[str, Any]) -> float:
    """The pod's termination grace, bounded for a test cluster (the kubelet's is 30 s)."""
    grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
    return float(min(max(int(grace), 1), MAX_GRACE_SECONDS))


def _pre_stop_seconds(pod: Mapping[str, Any]) -> float:
    """The first container's ``preStop`` ``sleep N``, capped at ``PRE_STOP_CAP_SECONDS``
    (0 without one): the stand-in runs no other hook."""
    for container in pod["spec"].get("containers") or []:
        command = (((container.get("lifecycle") or {}).get("preStop") or {}).get("exec") or {}).get(
            "command"
        ) or []
        if len(command) == 2 and command[0] == "sleep":
            try:
                return min(max(float(command[1]), 0.0), PRE_STOP_CAP_SECONDS)
            except ValueError:
                return 0.0
    return 0.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _signal(run: PodRun, sig: signal.Signals) -> None:
    for process in run.processes.values():
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)


def _kill(runs: list[PodRun], grace: float = 5.0) -> None:
    """SIGTERM every pod's process groups, SIGKILL what is left after ``grace`` seconds.

    All pods at once: one at a time, n pods slow to drain would take n x ``grace``, past
    the 10 s the cluster's ``down`` gives the stand-in itself before its SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for run in runs:
            _signal(run, sig)
        deadline = time.monotonic() + grace
        while not all(run.done() for run in runs) and time.monotonic() < deadline:
            time.sleep(0.05)
        if all(run.done() for run in runs):
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument(
        "--prometheus-targets", type=Path, help="file-discovery folder of the cluster's Prometheus"
    )
    parser.add_argument(
        "--serving",
        choices=SERVING_MODES,
        default=SERVING_EMULATED,
        help="emulate: an emulated vLLM process per serving pod; kwok: KWOK's Ready alone",
    )
    args = parser.parse_args(argv)
    standin = StandIn(
        KubeApi.from_kubeconfig(args.kubeconfig),
        pods_dir=args.workdir / "pods",
        marker=os.environ.get("SPECDEPLOY_CLUSTER_WORKDIR", str(args.workdir)),
        targets=PrometheusTargets(args.prometheus_targets) if args.prometheus_targets else None,
        serving=args.serving,
    )
    stopping = False

    def on_term(_sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    standin.step()
    (args.workdir / "run" / READY_FILE).write_text(str(os.getpid()))
    while not stopping:
        time.sleep(POLL)
        try:
            standin.step()
        except (ApiError, OSError) as err:
            print(f"kubelet stand-in: {err}", file=sys.stderr, flush=True)
    standin.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
