"""``specdeploy load``: closed-loop streaming load against a loopback OpenAI-compatible server.

::

    specdeploy load --url http://127.0.0.1:8000 --model NAME --concurrency 8 --duration 60 \\
        [--workload chat|code|random] [--max-requests N] [--max-tokens T] [--ignore-eos] \\
        [--timeout S] [--seed N] [--json OUT] [--api chat|completions] \\
        [--backoff S] [--timeline-bucket S]
    specdeploy load --url ... --model NAME --ramp 30s@2,60s@16,60s@2 [...]

``--ramp`` replaces ``--concurrency`` and ``--duration``: stages of
DURATION@CONCURRENCY run back to back (``loadgen/ramp.py``).

A test tool: only loopback URLs (127.0.0.0/8, ::1, localhost) are accepted.
Bounds (``loadgen/config.py``): concurrency <= 1024, duration <= 3600 s,
max requests 10000 by default (cap 100000), max tokens 128 (cap 32768),
timeout 60 s per request (cap 600 s); a run lasts at most duration +
timeout. Exit codes: 0 at least one request succeeded and none failed or
timed out (retriable refusals, 429/503 or a closed port, allowed), 1 some
failed or timed out (the summary is still printed), 2 usage errors (a
non-loopback URL among them) or aiohttp missing, 130 interrupted (Ctrl-C;
the summary of what was measured is printed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdeploy.cli.loadgen.config import (
    APIS,
    DEFAULT_API,
    DEFAULT_BACKOFF_S,
    DEFAULT_BUCKET_S,
    DEFAULT_MAX_REQUESTS,
    DEFAULT_MAX_TOKENS,
    DEFAULT_SEED,
    DEFAULT_TIMEOUT_S,
    DEFAULT_WORKLOAD,
    MAX_CONCURRENCY,
    MAX_DURATION_S,
    WORKLOADS,
    LoadConfig,
    UsageError,
)

if TYPE_CHECKING:
    from specdeploy.cli.loadgen.ramp import Stage
    from specdeploy.cli.loadgen.runner import LoadRun

MISSING_AIOHTTP = (
    "needs aiohttp, which comes with the operator extra: pip install 'specdeploy[operator]'"
)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "load",
        help="closed-loop streaming load against a loopback OpenAI-compatible server",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("--url", required=True, help="server base URL, loopback only")
    p.add_argument("--model", required=True, help="served model name")
    p.add_argument("--concurrency", type=int, help=f"workers (1-{MAX_CONCURRENCY})")
    p.add_argument("--duration", type=float, help=f"seconds (<= {MAX_DURATION_S:g})")
    p.add_argument(
        "--ramp",
        help="stages DURATION@CONCURRENCY,... run back to back, e.g. 30s@2,60s@16,60s@2 "
        "(instead of --concurrency and --duration)",
    )
    p.add_argument("--workload", choices=WORKLOADS, default=DEFAULT_WORKLOAD)
    p.add_argument("--api", choices=APIS, default=DEFAULT_API)
    p.add_argument("--max-requests", type=int, default=DEFAULT_MAX_REQUESTS)
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS)
    p.add_argument("--ignore-eos", action="store_true", help="decode max-tokens every time")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per request")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument(
        "--backoff",
        type=float,
        default=DEFAULT_BACKOFF_S,
        help="seconds a worker waits after a retriable refusal (429, 503, connection refused)",
    )
    p.add_argument(
        "--timeline-bucket",
        type=float,
        default=DEFAULT_BUCKET_S,
        help="seconds per row of the JSON's timeline",
    )
    p.add_argument("--json", dest="json_out", type=Path, help="write summary and rows as JSON")
    p.set_defaults(handler=run)


def config_from(args: argparse.Namespace) -> LoadConfig:
    """The run's configuration, its URL checked for loopback (``UsageError`` otherwise)."""
    from specdeploy.cli.loadgen.loopback import require_loopback
    from specdeploy.cli.loadgen.ramp import RampError, parse_ramp

    ramp: tuple[Stage, ...] = ()
    if args.ramp is not None:
        if args.concurrency is not None or args.duration is not None:
            raise UsageError("--ramp replaces --concurrency and --duration: give one or the other")
        try:
            ramp = parse_ramp(args.ramp)
        except RampError as err:
            raise UsageError(f"--ramp: {err}") from None
    elif args.concurrency is None or args.duration is None:
        raise UsageError("give --concurrency and --duration, or --ramp")
    return LoadConfig(
        url=require_loopback(args.url),
        model=args.model,
        concurrency=args.concurrency or 0,
        duration_s=args.duration or 0.0,
        ramp=ramp,
        workload=args.workload,
        api=args.api,
        max_requests=args.max_requests,
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos,
        timeout_s=args.timeout,
        seed=args.seed,
        backoff_s=args.backoff,
        timeline_bucket_s=args.timeline_bucket,
    )


def _usage_error(message: str) -> int:
    print(f"specdeploy load: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    try:
        config = config_from(args)
    except UsageError as err:
        return _usage_error(str(err))
    if importlib.util.find_spec("aiohttp") is None:
        return _usage_error(MISSING_AIOHTTP)
    from specdeploy.cli.loadgen.report import document, exit_code, format_summary

    doc = document(asyncio.run(_drive(config)))
    print(format_summary(doc["summary"]))
    if args.json_out:
        args.json_out.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"JSON written to {args.json_out}")
    return exit_code(doc["summary"])


async def _drive(config: LoadConfig) -> LoadRun:
    from specdeploy.cli.loadgen.runner import LoadRunner

    runner = LoadRunner(config, progress=lambda line: print(line, file=sys.stderr, flush=True))
    loop = asyncio.get_running_loop()
    # Ctrl-C stops the run and keeps what it measured, instead of unwinding past it.
    try:
        loop.add_signal_handler(signal.SIGINT, runner.interrupt)
        installed = True
    except (NotImplementedError, RuntimeError):  # no signal handlers here (a thread, Windows)
        installed = False
    try:
        return await runner.run()
    finally:
        if installed:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGINT)
