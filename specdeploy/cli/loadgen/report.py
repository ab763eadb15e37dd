"""The run as text for a person and as JSON for a script, and the exit code it earns.

JSON (``--json OUT``): the summary of ``stats.summarize`` (``workload``,
``concurrency``, ``duration_s``, ..., ``requests: {sent, ok, failed,
cancelled, failed_by_reason}``, ``output_tokens``, ``output_tokens_per_s``,
``ttft_ms``/``tpot_ms``/``latency_ms``: ``{p50, p90, p99, mean, count}``)
under ``summary``, and one row per finished request under ``rows``, in send
order.
"""

from __future__ import annotations

from typing import Any

from specdeploy.cli.loadgen.results import RequestResult
from specdeploy.cli.loadgen.runner import LoadRun
from specdeploy.cli.loadgen.stats import QUANTILES, summarize

KIND = "specdeploy-load"
VERSION = 1

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
    """0: at least one request succeeded and none failed; 1: otherwise; 130: interrupted."""
    if summary["stopped_by"] == "interrupt":
        return EXIT_INTERRUPTED
    requests = summary["requests"]
    return EXIT_OK if requests["ok"] > 0 and requests["failed"] == 0 else EXIT_FAILED


def _figure(value: float | None) -> str:
    return f"{value:10.1f}" if value is not None else f"{'-':>10}"


def format_summary(summary: dict[str, Any]) -> str:
    """The summary a person reads at the end of a run."""
    r = summary["requests"]
    reasons = ", ".join(f"{k} {v}" for k, v in r["failed_by_reason"].items())
    rate = summary["output_tokens_per_s"]
    lines = [
        f"workload {summary['workload']} (prompts: {summary['prompts']}), "
        f"api {summary['api']}, concurrency {summary['concurrency']}, "
        f"duration {summary['duration_s']:g} s, max requests {summary['max_requests']}",
        f"stopped by {summary['stopped_by']} after {summary['elapsed_s']:.1f} s "
        f"(at most {summary['max_in_flight']} in flight)",
        f"requests: {r['ok']} ok, {r['failed']} failed"
        + (f" ({reasons})" if reasons else "")
        + (f", {r['cancelled']} cancelled" if r["cancelled"] else ""),
        f"output tokens: {summary['output_tokens']}"
        + (f" ({rate:.1f} tok/s, {summary['requests_per_s']:.2f} req/s)" if rate else ""),
        f"{'(ms)':<10}" + "".join(f"{'p' + str(q):>10}" for q in QUANTILES),
    ]
    for label, key in (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("latency", "latency_ms")):
        figures = summary[key]
        lines.append(f"{label:<10}" + "".join(_figure(figures[f"p{q}"]) for q in QUANTILES))
    return "\n".join(lines)
