"""Where a finished profile goes: a file, stdout, or the Kubernetes API.

Through the API the profile is *created or replaced* as a
``speculationprofiles.specdeploy.io/v1alpha1`` resource: POST; if it exists
(409), GET it and PUT our spec over it, keeping its metadata (owner
references, labels and annotations others set; ours win on a clash) and
its resourceVersion, so a concurrent writer is detected rather than
overwritten (409 again: re-read and retry). ``status`` is a subresource
that belongs to the operator: a PUT of the main resource leaves it alone.

The Job's ServiceAccount needs ``create``, ``get`` and ``update`` on
``speculationprofiles`` in its namespace. ``check_access`` asks the API
(SelfSubjectAccessReview, allowed to every authenticated identity) before
any GPU time is spent, so missing RBAC fails in seconds, not after the
profile. Refusals that a retry cannot fix (401, 403, 404: the CRD is not
installed, 422: invalid) are deterministic; 429, 5xx and unreachable
servers are transient.

The final write is the one that must not lose hours of measurement (review
H5): ``write`` keeps trying for ``patience`` seconds (default 10 minutes),
backing off from 1 s to 30 s, through an unreachable or overloaded server
and through 401/403 too - the access check passed before any measuring, so
a refusal of our identity now is a token rotation or an API server still
starting, not missing RBAC. Only answers about the document itself (400,
404, 405, 422) fail at once. If it gives up all the same, ``recoverable``
prints the whole profile between two marker lines on stdout, so the
measurement survives in the pod's log instead of being measured again:
``kubectl logs job/NAME | sed -n '/BEGIN SPECDEPLOY/,/END SPECDEPLOY/{//!p}' |
kubectl apply -f -`` (profiles/README.md).

The access check before measuring asks again for up to ``ACCESS_PATIENCE_S``
when it is denied: the operator creates the RoleBinding in the same
reconcile as the Job, and the authorizer's cache may lag it for a moment.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from specdeploy.runtime.kube import paths
from specdeploy.runtime.kube.client import TRANSPORT_ERRORS
from specdeploy.runtime.kube.requests import JSON, Query, Request, Response
from specdeploy.runtime.profile import (
    GROUP,
    PROFILE_KIND,
    PROFILE_PLURAL,
    SpeculationProfile,
    dump_profile,
    save_profile,
)
from specdeploy.runtime.profiler.exit_codes import DeterministicFailure, output_rejected

VERBS = ("create", "get", "update")
DETERMINISTIC_STATUSES = frozenset({400, 401, 403, 404, 405, 422})
IDENTITY_STATUSES = frozenset({401, 403})
"""Refusals of who we are: deterministic before measuring, worth waiting out after it."""
RETRIES = 4
PATIENCE_S = 600.0
"""How long the final write keeps trying through transient failures."""
PATIENT_DELAYS = (1.0, 30.0)
"""First and largest pause between the final write's tries (doubling)."""
ACCESS_PATIENCE_S = 60.0
"""How long a denied access check is asked again before it fails deterministically."""
BEGIN_MARKER = "-----BEGIN SPECDEPLOY PROFILE-----"
END_MARKER = "-----END SPECDEPLOY PROFILE-----"


def recoverable(doc: SpeculationProfile) -> str:
    """The profile as YAML between the markers: what a failed final write leaves in the log."""
    return f"{BEGIN_MARKER}\n{dump_profile(doc).rstrip()}\n{END_MARKER}\n"


class KubeUnavailable(RuntimeError):
    """The API server could not be reached or answered nothing usable (transient)."""


class Exchanger(Protocol):
    """What the writer needs from a client: every status answered (a ``kube.client.Client``)."""

    def exchange(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        content_type: str = JSON,
        query: Query = (),
    ) -> tuple[int, bytes]: ...


class ProfileWriter(Protocol):
    """Writes a finished profile somewhere; returns where, for the log."""

    def write(self, doc: SpeculationProfile) -> str: ...


class FileWriter:
    """YAML (or JSON by suffix) to a file, atomically; ``-`` is stdout."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, doc: SpeculationProfile) -> str:
        if str(self.path) == "-":
            sys.stdout.write(dump_profile(doc))
            return "stdout"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        save_profile(doc, self.path)
        return str(self.path)


def access_review(namespace: str, verb: str) -> Request:
    """May this identity ``verb`` SpeculationProfiles in ``namespace``?"""
    return Request(
        "POST",
        paths.path("SelfSubjectAccessReview"),
        f"access review for {verb}",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": namespace,
                    "verb": verb,
                    "group": GROUP,
                    "resource": PROFILE_PLURAL,
                }
            },
        },
    )


def replaced(existing: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as a PUT over ``existing``: its metadata kept, our labels/annotations on top."""
    old_meta = dict(existing.get("metadata") or {})
    new_meta = body["metadata"]
    for key in ("labels", "annotations"):
        merged = {**(old_meta.get(key) or {}), **(new_meta.get(key) or {})}
        if merged:
            old_meta[key] = merged
    return {**body, "metadata": old_meta}


class ApiWriter:
    """Create-or-replace through the API (module docstring)."""

    def __init__(
        self,
        client: Exchanger,
        namespace: str,
        *,
        name: str | None = None,
        sleep: Callable[[float], None] | None = None,
        patience: float = PATIENCE_S,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.sleep = sleep or (lambda seconds: time.sleep(seconds))
        self.patience = patience
        self.clock = clock
        self.log = log or (lambda line: print(f"specdeploy profile: {line}", file=sys.stderr))

    def check_access(self, patience: float | None = None) -> None:
        """Fail now, deterministically, when RBAC would refuse the write later.

        A denial is asked again for ``patience`` seconds (the module docstring says why).
        """
        deadline = self.clock() + (ACCESS_PATIENCE_S if patience is None else patience)
        delay = PATIENT_DELAYS[0]
        while True:
            denied = self._denied_verbs()
            if not denied:
                return
            if self.clock() + delay > deadline:
                raise output_rejected(
                    f"this service account may not {'/'.join(denied)} {PROFILE_PLURAL}.{GROUP} "
                    f"in namespace {self.namespace} (needs {', '.join(VERBS)})"
                )
            verbs = "/".join(denied)
            self.log(f"not yet allowed to {verbs} {PROFILE_PLURAL}; asking again in {delay:.0f}s")
            self.sleep(delay)
            delay = min(PATIENT_DELAYS[1], delay * 2)

    def _denied_verbs(self) -> list[str]:
        denied = []
        for verb in VERBS:
            response = self._send(access_review(self.namespace, verb))
            if response.status == 404:
                return []  # no authorization API to ask (a bare test server): find out on write
            self._raise_if_refused(response, f"access review for {verb}")
            if not (response.body.get("status") or {}).get("allowed", False):
                denied.append(verb)
        return denied

    def write(self, doc: SpeculationProfile) -> str:
        """``write_once``, tried again through transient failures for ``patience`` seconds."""
        deadline = self.clock() + self.patience
        delay, largest = PATIENT_DELAYS
        tries = 0
        while True:
            tries += 1
            try:
                return self.write_once(doc)
            except KubeUnavailable as err:
                problem = str(err)
            except DeterministicFailure as err:
                if self._last_status not in IDENTITY_STATUSES:
                    raise
                problem = err.reason
            if self.clock() + delay > deadline:
                raise KubeUnavailable(
                    f"gave up writing the profile after {tries} tries over "
                    f"{self.patience:.0f}s: {problem}"
                )
            self.log(f"writing the profile failed ({problem}); trying again in {delay:.0f}s")
            self.sleep(delay)
            delay = min(largest, delay * 2)

    def write_once(self, doc: SpeculationProfile) -> str:
        """Create or replace once (the module docstring)."""
        body = doc.to_document()
        body.pop("status", None)
        name = self.name or body["metadata"].get("name")
        if not name:
            raise ValueError("a profile written through the API needs a name")
        body["metadata"] = {**body["metadata"], "name": name, "namespace": self.namespace}
        where = f"{self.namespace}/{name}"
        collection = paths.path(PROFILE_KIND, self.namespace)
        created = self._send(Request("POST", collection, f"create {where}", body=body))
        if created.ok:
            return f"{PROFILE_PLURAL}.{GROUP} {where} (created)"
        if created.status != 409:
            self._raise_if_refused(created, f"create {where}")
        item = paths.path(PROFILE_KIND, self.namespace, name)
        for _ in range(RETRIES):
            existing = self._send(Request("GET", item, f"read {where}"))
            self._raise_if_refused(existing, f"read {where}")
            update = replaced(existing.body, body)
            put = self._send(Request("PUT", item, f"replace {where}", body=update))
            if put.ok:
                return f"{PROFILE_PLURAL}.{GROUP} {where} (replaced)"
            if put.status != 409:
                self._raise_if_refused(put, f"replace {where}")
        raise KubeUnavailable(f"replace {where}: still conflicting after {RETRIES} tries")

    def _exchange(self, request: Request) -> Response:
        """One try; raise KubeUnavailable when no HTTP answer came back."""
        try:
            answer = self.client.exchange(
                request.method,
                request.path,
                body=request.body,
                content_type=request.content_type,
                query=request.query,
            )
        except TRANSPORT_ERRORS as err:
            raise KubeUnavailable(f"{request.method} {request.path}: {err}") from err
        return Response.of(*answer)

    def _send(self, request: Request) -> Response:
        """Send with retries on transient answers (429, 5xx, unreachable)."""
        delay = 0.5
        for attempt in range(RETRIES):
            try:
                response = self._exchange(request)
            except KubeUnavailable:
                if attempt == RETRIES - 1:
                    raise
            else:
                if response.status != 429 and response.status < 500:
                    return response
                if attempt == RETRIES - 1:
                    return response
            self.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")

    _last_status: int | None = None
    """The status of the last refusal ``_raise_if_refused`` raised for."""

    def _raise_if_refused(self, response: Response, what: str) -> None:
        if response.ok:
            return
        self._last_status = response.status
        if response.status in DETERMINISTIC_STATUSES:
            hint = " (is the SpeculationProfile CRD installed?)" if response.status == 404 else ""
            raise output_rejected(f"{what}: {response.message()}{hint}")
        raise KubeUnavailable(f"{what}: {response.message()}")
