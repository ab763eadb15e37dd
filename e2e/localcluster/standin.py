"""The kubelet stand-in: runs marked pods' commands locally, then ends the pods through KWOK.

KWOK nodes run no containers. Where a test needs a container's effect (the
profiler writing a SpeculationProfile, later an emulated vLLM pod) the pod
carries the annotation ``specdeploy.io/run-locally: "true"``; once KWOK has
made it Running on a fake node, this process does what a kubelet would:

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

A pod deleted while its command runs has the command's process group killed.
The stand-in lists pods every ``POLL`` seconds instead of watching: a local
test cluster has few pods, and a poll cannot miss an event.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.localcluster import kubeconfig, podenv, stages
from e2e.localcluster.fleet import KWOK_ANNOTATION
from e2e.localcluster.kubeapi import ApiError, KubeApi
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
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    termination_files: dict[str, Path] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return str(self.pod["metadata"]["uid"])

    def done(self) -> bool:
        return all(p.poll() is not None for p in self.processes.values())


def _pod_dir(pods_dir: Path, pod: Mapping[str, Any]) -> Path:
    meta = pod["metadata"]
    return pods_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"


class StandIn:
    """One poll loop over the cluster's pods; ``step`` is one iteration."""

    def __init__(self, api: KubeApi, *, pods_dir: Path, marker: str) -> None:
        self.api = api
        self.objects = ApiObjects(api)
        self.pods_dir = pods_dir
        self.marker = marker
        self.runs: dict[str, PodRun] = {}
        self.seen: set[str] = set()
        self.fake_nodes: set[str] = set()

    def step(self) -> None:
        pods = self.api.items(paths.path("Pod"), fieldSelector="status.phase=Running")
        live = {p["metadata"]["uid"]: p for p in pods if not p["metadata"].get("deletionTimestamp")}
        for pod in live.values():
            if self._wanted(pod):
                self.seen.add(pod["metadata"]["uid"])
                self._start(pod)
        for uid, run in list(self.runs.items()):
            if uid not in live:
                _kill(run)
                del self.runs[uid]
            elif run.done():
                self._report(run)
                del self.runs[uid]

    def _wanted(self, pod: Obj) -> bool:
        meta = pod["metadata"]
        annotations = meta.get("annotations", {})
        return (
            annotations.get(stages.RUN_LOCALLY) == "true"
            and stages.EXIT_CODE not in annotations
            and meta["uid"] not in self.seen
            and self._is_fake(pod["spec"].get("nodeName", ""))
        )

    def _is_fake(self, node: str) -> bool:
        if node and node not in self.fake_nodes:
            found = self.api.get_or_none(paths.path("Node", name=node)) or {}
            key, value = KWOK_ANNOTATION
            if found.get("metadata", {}).get("annotations", {}).get(key) == value:
                self.fake_nodes.add(node)
        return node in self.fake_nodes

    def _start(self, pod: Obj) -> None:
        run = PodRun(pod, _pod_dir(self.pods_dir, pod))
        self.runs[run.key] = run
        try:
            for container in pod["spec"]["containers"]:
                self._start_container(run, container)
        except (ValueError, KeyError, ApiError, OSError) as err:  # PodConfigError included
            _kill(run)
            del self.runs[run.key]
            self._annotate(pod, CONFIG_ERROR_CODE, f"kubelet stand-in: {err}")

    def _start_container(self, run: PodRun, container: Obj) -> None:
        name = container["name"]
        mounts = materialize_mounts(run.root, run.pod, container, self.objects, self.objects)
        termination = run.root / "termination" / name
        termination.parent.mkdir(parents=True, exist_ok=True)
        termination.touch()
        mounts[container.get("terminationMessagePath", DEFAULT_TERMINATION_PATH)] = str(termination)
        env = self._environment(run, container, mounts)
        argv = [podenv.rewrite_paths(a, mounts) for a in podenv.command_line(container, env)]
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
        self._annotate(run.pod, code, message)

    def _annotate(self, pod: Obj, code: int, message: str) -> None:
        meta = pod["metadata"]
        path = paths.path("Pod", namespace=meta["namespace"], name=meta["name"])
        patch = {"metadata": {"annotations": stages.exit_annotations(code, message)}}
        try:
            self.api.merge_patch(path, patch)
        except ApiError as err:
            if err.status != 404:
                raise

    def shutdown(self) -> None:
        for run in self.runs.values():
            _kill(run)
        self.runs.clear()


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


def _kill(run: PodRun) -> None:
    """SIGTERM each process group, SIGKILL what is left after a short grace."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for process in run.processes.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, sig)
        deadline = time.monotonic() + 5.0
        while not run.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        if run.done():
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args(argv)
    standin = StandIn(
        KubeApi.from_kubeconfig(args.kubeconfig),
        pods_dir=args.workdir / "pods",
        marker=os.environ.get("SPECDEPLOY_CLUSTER_WORKDIR", str(args.workdir)),
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
