"""The run as text for a person and as JSON for a script, and the exit code it earns.

JSON (``--json OUT``, version 2): the summary of ``stats.summarize``
(``workload``, ``concurrency`` (a ramp's peak), ``duration_s``, ``ramp``,
..., ``requests: {sent, ok, refused, failed, timed_out, cancelled,
by_reason}``, ``output_tokens``, ``output_tokens_per_s``,
``ttft_ms``/``tpot_ms``/``latency_ms``: ``{p50, p90, p99, mean, count}``)
under ``summary``; the run over time under ``timeline`` (``timeline.py``:
``{bucket_s, started_at_unix, rows}``); and one row per finished request
under ``rows``, in send order, with its ``outcome``.

Version 2 split version 1's ``failed`` (every request not ok) into the
outcome classes of ``results.py`` and renamed ``failed_by_reason`` to
``by_reason``: a retriable refusal is not a failure.
"""

from __future__ import annotations

from typing import Any

from specdeploy.cli.loadgen.results import RequestResult, outcome
from specdeploy.cli.loadgen.runner import LoadRun
from specdeploy.cli.loadgen.stats import QUANTILES, summarize
from specdeploy.cli.loadgen.timeline import timeline

KIND = "specdeploy-load"
VERSION = 2

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INTERRUPTED = 130
"""Ctrl-C, as shells report it: a cut-short run is neither a pass nor a failure."""


def document(run: LoadRun) -> dict[str, Any]:
    """The JSON document: the summary and the per-request rows."""
    rows = sorted(run.results, key=lambda r: r.index)
    return {
        "kind": KIND,
        "version": VERSION,
        "summary": summarize(run),
        "timeline": timeline(run),
        "rows": [row(r) for r in rows],
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def row(result: RequestResult) -> dict[str, Any]:
    """One request: its place, outcome and timings (milliseconds)."""
    m = result.measured
    return {
        "index": result.index,
        "worker": result.worker,
        "start_s": round(result.start_s, 6),
        "ok": m.ok,
        "outcome": m.outcome,
        "reason": m.reason,
        "status": m.status,
        "output_tokens": m.output_tokens,
        "tokens_from": m.tokens_from,
        "ttft_ms": _ms(m.ttft_s),
        "tpot_ms": _ms(m.tpot_s),
        "latency_ms": _ms(m.latency_s),
        "detail": m.detail,
    }


def exit_code(summary: dict[str, Any]) -> int:
    """0: some succeeded, none failed or timed out (refusals allowed); 1: otherwise; 130: ^C."""
    if summary["stopped_by"] == "interrupt":
        return EXIT_INTERRUPTED
    r = summary["requests"]
    clean = r["ok"] > 0 and r["failed"] == 0 and r["timed_out"] == 0
    return EXIT_OK if clean else EXIT_FAILED


def _class(requests: dict[str, Any], name: str, label: str) -> str:
    """``2 refused (http_503 1, refused 1)``: a class's count with its kinds."""
    kinds = [(k, v) for k, v in requests["by_reason"].items() if outcome(k) == name]
    detail = ", ".join(f"{k} {v}" for k, v in kinds)
    return f"{requests[name]} {label}" + (f" ({detail})" if detail and name != "timed_out" else "")


def _figure(value: float | None) -> str:
    return f"{value:10.1f}" if value is not None else f"{'-':>10}"


def format_summary(summary: dict[str, Any]) -> str:
    """The summary a person reads at the end of a run."""
    r = summary["requests"]
    rate = summary["output_tokens_per_s"]
    shape = (
        f"ramp {summary['ramp']}" if summary["ramp"] else f"concurrency {summary['concurrency']}"
    )
    lines = [
        f"workload {summary['workload']} (prompts: {summary['prompts']}), "
        f"api {summary['api']}, {shape}, "
        f"duration {summary['duration_s']:g} s, max requests {summary['max_requests']}",
        f"stopped by {summary['stopped_by']} after {summary['elapsed_s']:.1f} s "
        f"(at most {summary['max_in_flight']} in flight)",
        f"requests: {r['ok']} ok, "
        + _class(r, "refused", "refused")
        + ", "
        + _class(r, "failed", "failed")
        + ", "
        + _class(r, "timed_out", "timed out")
        + (f", {r['cancelled']} cancelled" if r["cancelled"] else ""),
        f"output tokens: {summary['output_tokens']}"
        + (f" ({rate:.1f} tok/s, {summary['requests_per_s']:.2f} req/s)" if rate else ""),
        f"{'(ms)':<10}" + "".join(f"{'p' + str(q):>10}" for q in QUANTILES),
    ]
    for label, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("latency", "latency_ms")):
        figures = summary[key]
        lines.append(f"{label:<10}" + "".join(_figure(figures[f"p{q}"]) for q in QUANTILES))
    return "\n".join(lines)
