"""The ``vllm serve`` command line, as far as the emulated server needs it.

The kubelet stand-in passes the serving container's arguments unchanged (argv
after ``vllm serve``: ``operator/.../builders/deployment.py``), user
``extraArgs`` included. Flags that shape what is emulated are parsed with
vLLM 0.32's names and defaults; any other flag is accepted and ignored with
one log line, so a spec written for a real cluster starts here unchanged. A
known flag with a bad value, or a ``--speculative-config`` vLLM would refuse,
stops the server at start with a message naming it, as vLLM would.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from specdeploy.runtime.ranges import ScheduleError, expand_lookup

log = logging.getLogger("specdeploy.emulated")

DEFAULT_PORT = 8000
DEFAULT_MAX_NUM_SEQS = 256
"""vLLM's default ``--max-num-seqs``."""
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
"""Prefill token budget per step (the simulator presets' figure)."""
DEFAULT_MAX_MODEL_LEN = 8192
"""Context limit when ``--max-model-len`` is not given (a real vLLM reads the model's
config; the emulator has no model files)."""


class ArgsError(ValueError):
    """A command line vLLM would refuse; the message names the flag."""


@dataclass(frozen=True)
class Speculation:
    """``--speculative-config``: what vLLM builds its drafter and K lookup from."""

    method: str
    num_speculative_tokens: int
    per_batch_size: tuple[tuple[int, int, int], ...] | None
    """``num_speculative_tokens_per_batch_size`` ranges (None: a fixed K)."""
    draft_model: str | None = None

    def lookup(self, max_num_seqs: int) -> list[int] | None:
        """vLLM's ``dynamic_sd_lookup`` (index = scheduled requests), None without a table."""
        if self.per_batch_size is None:
            return None
        ranges = [list(r) for r in self.per_batch_size]
        try:
            return expand_lookup(ranges, self.num_speculative_tokens, max_num_seqs)
        except (ScheduleError, ValueError) as err:
            raise ArgsError(
                f"--speculative-config: num_speculative_tokens_per_batch_size: {err}"
            ) from None


@dataclass(frozen=True)
class ServeArgs:
    """The parsed command line."""

    model: str
    served_model_names: tuple[str, ...]
    port: int
    tensor_parallel_size: int
    shutdown_timeout: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    speculation: Speculation | None
    scheduler_cls: str | None
    seed: int
    ignored: tuple[str, ...]
    """Arguments not understood here (logged once, never an error)."""

    @property
    def served_name(self) -> str:
        """The first served name: the ``model_name`` label of vLLM's metrics."""
        return self.served_model_names[0]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m e2e.emulated.vllm_serve",
        description="An EMULATED vLLM server (no GPU, no model): vllm serve's arguments.",
        allow_abbrev=False,
    )
    p.add_argument("model_tag", nargs="?", help="the model (positional, as vllm serve)")
    p.add_argument("--model", dest="model_flag")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--host", help="ignored: the emulator binds 127.0.0.1 only")
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--shutdown-timeout", type=int, default=0)
    p.add_argument("--max-num-seqs", type=int, default=DEFAULT_MAX_NUM_SEQS)
    p.add_argument("--max-num-batched-tokens", type=int, default=DEFAULT_MAX_NUM_BATCHED_TOKENS)
    p.add_argument("--max-model-len", type=int, default=DEFAULT_MAX_MODEL_LEN)
    p.add_argument("--speculative-config")
    p.add_argument("--scheduler-cls")
    p.add_argument("--seed", type=int, default=0)
    # Accepted because they take a value: left to argparse's unknown list, a
    # flag's separate value would otherwise be taken for an argument.
    for flag in ("--revision", "--dtype", "--tokenizer", "--download-dir"):
        p.add_argument(flag)
    return p


def parse_args(argv: Sequence[str]) -> ServeArgs:
    """Parse ``argv`` (after ``vllm serve``); ``ArgsError`` or argparse's exit on bad input."""
    known, unknown = _parser().parse_known_args(list(argv))
    model = known.model_tag or known.model_flag
    if not model:
        raise ArgsError("no model: give it as the first argument (vllm serve MODEL ...)")
    _positive(known.port, "--port", upper=65535)
    for value, flag in (
        (known.tensor_parallel_size, "--tensor-parallel-size"),
        (known.max_num_seqs, "--max-num-seqs"),
        (known.max_num_batched_tokens, "--max-num-batched-tokens"),
        (known.max_model_len, "--max-model-len"),
    ):
        _positive(value, flag)
    if known.shutdown_timeout < 0:
        raise ArgsError(f"--shutdown-timeout: must be >= 0, got {known.shutdown_timeout}")
    ignored = list(unknown)
    if known.host is not None:
        ignored.append(f"--host={known.host}")
    speculation = None
    if known.speculative_config is not None:
        speculation = parse_speculative_config(known.speculative_config)
        speculation.lookup(known.max_num_seqs)  # refuse a bad table at start, as vLLM does
    return ServeArgs(
        model=model,
        served_model_names=tuple(known.served_model_name or [model]),
        port=known.port,
        tensor_parallel_size=known.tensor_parallel_size,
        shutdown_timeout=known.shutdown_timeout,
        max_num_seqs=known.max_num_seqs,
        max_num_batched_tokens=known.max_num_batched_tokens,
        max_model_len=known.max_model_len,
        speculation=speculation,
        scheduler_cls=known.scheduler_cls,
        seed=known.seed,
        ignored=tuple(ignored),
    )


def parse_speculative_config(text: str) -> Speculation:
    """``--speculative-config`` JSON: method, num_speculative_tokens, optional table."""
    flag = "--speculative-config"
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise ArgsError(f"{flag}: not valid JSON: {err}") from None
    if not isinstance(doc, dict):
        raise ArgsError(f"{flag}: expected a JSON object, got {type(doc).__name__}")
    method = doc.get("method")
    if not isinstance(method, str) or not method:
        raise ArgsError(f"{flag}: method: required (eagle, eagle3, draft_model, ngram, ...)")
    k = doc.get("num_speculative_tokens")
    if type(k) is not int or k < 1:
        raise ArgsError(f"{flag}: num_speculative_tokens: must be an integer >= 1, got {k!r}")
    table = doc.get("num_speculative_tokens_per_batch_size")
    ranges = None
    if table is not None:
        if not isinstance(table, list) or not all(
            isinstance(r, list) and len(r) == 3 and all(type(x) is int for x in r) for r in table
        ):
            raise ArgsError(
                f"{flag}: num_speculative_tokens_per_batch_size: expected [[lo, hi, K], ...]"
            )
        ranges = tuple((r[0], r[1], r[2]) for r in table)
    draft = doc.get("model")
    return Speculation(method, k, ranges, draft if isinstance(draft, str) else None)


def _positive(value: int, flag: str, *, upper: int | None = None) -> None:
    if value < 1 or (upper is not None and value > upper):
        bound = f"1..{upper}" if upper is not None else ">= 1"
        raise ArgsError(f"{flag}: must be {bound}, got {value}")
