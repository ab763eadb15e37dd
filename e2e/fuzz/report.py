"""The fuzz run's record: counts by outcome and field, violations, seed and wall time."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from e2e.fuzz import known as known_defects
from e2e.fuzz import oracle
from e2e.fuzz.runner import Outcome, Report
from e2e.localcluster import audit

Obj = dict[str, Any]


def summary(report: Report, *, specs: int) -> Obj:
    by_kind = Counter(o.kind for o in report.outcomes)
    invalid = [o for o in report.outcomes if o.kind == "invalid"]
    rejected = [o for o in report.outcomes if o.kind == "rejected"]
    unknown, known = known_defects.split(report)
    return {
        "what": "F1/F3 fuzz of the SpeculativeDeployment API on the local control plane "
        "(real kube-apiserver and operator; profiles written by the harness, modelled)",
        "seed": report.seed,
        "specs": specs,
        "batchSize": report.batch_size,
        "wallSeconds": report.wall_seconds,
        "counts": {
            "rejectedAtAdmission": by_kind["rejected"],
            "validFalse": by_kind["invalid"],
            "valid": by_kind["valid"],
            "error": by_kind["error"],
        },
        "rejectedByField": dict(Counter(o.path for o in rejected).most_common()),
        "validFalseByReason": dict(Counter(o.reason for o in invalid).most_common()),
        "validFalseByField": dict(Counter(o.path for o in invalid).most_common()),
        "profilesLanded": report.profiles_landed,
        "profilesWithAnotherFingerprint": report.profiles_mismatched,
        "servingDeployments": report.deployments_served,
        "canariesReconciled": report.canaries,
        "violations": unknown,
        "knownDefectViolations": known,
        "knownDefects": known_defects.KNOWN_DEFECTS,
    }


def refused_retry_peak(audit_log: Path, prefix: str) -> Obj:
    """I8 (review §5.2) over the run: the fastest-retried refusal of an operator write,
    before the harness deleted the batch's namespace (a terminating namespace refuses
    every create with 403, which is the harness's doing)."""
    writes = list(audit.read_writes(audit_log))
    deleted = {
        w.name: w.at
        for w in writes
        if w.resource == "namespaces" and w.verb == "delete" and w.name.startswith(prefix + "-")
    }
    return oracle.retry_peak(
        (f"{w.namespace}/{w.name}", w.what, w.at.timestamp(), w.code)
        for w in writes
        if w.namespace.startswith(prefix + "-")
        and w.user_agent == audit.OPERATOR_USER_AGENT
        and (w.namespace not in deleted or w.at < deleted[w.namespace])
    )


def write(
    report: Report,
    out: Path,
    *,
    specs: int,
    audit_log: Path | None = None,
    stem: str = "fuzz_specs",
) -> Obj:
    data = summary(report, specs=specs)
    if audit_log is not None:
        data["refusedRetryPeak"] = refused_retry_peak(audit_log, report.prefix)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    (out / f"{stem}.md").write_text(markdown(data))
    return data


def markdown(data: Obj) -> str:
    c = data["counts"]
    lines = [
        "# Fuzzing the SpeculativeDeployment API (issue 15, review §5.4 F1 and F3)",
        "",
        f"{data['specs']} specs drawn from the CRD schema by hypothesis (seed {data['seed']}), "
        f"sent in batches of {data['batchSize']} to the local control plane's kube-apiserver "
        f"with the operator running; {data['wallSeconds']} s wall time on the 2-core box. "
        "Profiling is emulated: pods are held back by a node selector and the harness writes "
        "modelled profiles under the names the Jobs state (`e2e/fuzz/landing.py`). "
        "`make fuzz` reproduces it.",
        "",
        "| outcome | specs |",
        "|---|---|",
        f"| rejected at admission (422) | {c['rejectedAtAdmission']} |",
        f"| accepted, Valid=False | {c['validFalse']} |",
        f"| accepted, valid | {c['valid']} |",
        f"| other answer | {c['error']} |",
        "",
        f"Profiles landed: {data['profilesLanded']} ({data['profilesWithAnotherFingerprint']} "
        f"holding another fingerprint, F3); serving Deployments created: "
        f"{data['servingDeployments']}; canaries reconciled: {data['canariesReconciled']}.",
        "",
        f"**Violations: {len(data['violations'])}**",
        "",
    ]
    lines += [f"- {v}" for v in data["violations"][:50]]
    lines += [
        "",
        f"Violations of a known defect outside the API models and validation: "
        f"{len(data['knownDefectViolations'])} (replayed by the fixtures named):",
        "",
    ]
    lines += [f"- `{k}`: {v}" for k, v in data["knownDefects"].items()]
    lines += [f"- {v}" for v in data["knownDefectViolations"][:20]]
    peak = data.get("refusedRetryPeak")
    if peak and peak.get("object"):
        lines += [
            "",
            f"Retries of a refused write (review §5.2 I8, <= 2/min; reported, not judged): "
            f"the fastest was {peak['object']}, refused {peak['refusals']} times at "
            f"{peak['perMinute']}/min: the retries follow every event that reconciles the "
            "deployment (its namespace's Jobs, Services, profiles), not only its backoff.",
        ]
    for title, key in (
        ("Valid=False by reason", "validFalseByReason"),
        ("Valid=False by field", "validFalseByField"),
        ("Rejected at admission by field", "rejectedByField"),
    ):
        lines += ["", f"## {title}", "", "| | specs |", "|---|---|"]
        lines += [f"| `{k or '?'}` | {v} |" for k, v in data[key].items()]
    return "\n".join(lines) + "\n"


def save_failures(report: Report, bodies: list[Obj], out: Path) -> list[Path]:
    """Each spec with a violation as a YAML fixture (``regressions/`` format), to replay."""
    saved = []
    out.mkdir(parents=True, exist_ok=True)
    for outcome in (o for o in report.outcomes if o.violations):
        path = out / f"seed{report.seed}-{outcome.index}.yaml"
        path.write_text(
            yaml.safe_dump(
                fixture(outcome, bodies[outcome.index], report.seed),
                allow_unicode=True,
                sort_keys=False,
                width=100,
            )
        )
        saved.append(path)
    return saved


def fixture(outcome: Outcome, body: Obj, seed: int) -> Obj:
    return {
        "found": f"seed {seed}, spec {outcome.index}",
        "violations": outcome.violations,
        "expect": {"outcome": "?", "field": "?"},
        "body": body,
    }
