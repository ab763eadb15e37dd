"""The fuzz run's record: counts by outcome and field, violations, seed and wall time."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from e2e.fuzz import known as known_defects
from e2e.fuzz.runner import Outcome, Report

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


def write(report: Report, out: Path, *, specs: int, stem: str = "fuzz_specs") -> Obj:
    data = summary(report, specs=specs)
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
