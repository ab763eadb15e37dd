"""vLLM 0.32's own Prometheus metrics, as its API server exports them on ``/metrics``.

Names, label names and default buckets follow ``vllm/v1/metrics/loggers.py``,
``buckets.py`` and ``vllm/v1/spec_decode/metrics.py`` of vLLM 0.32: every
series carries ``model_name`` (the first served name) and ``engine``
(``"0"``: one engine per replica), so PromQL and dashboards written for a real
pod work here. A subset is exported (the scheduler, token, request and
speculative-decoding series); vLLM 0.32 has no ``vllm:time_per_output_token_seconds``
(its per-step successor is ``vllm:inter_token_latency_seconds``, the
per-request mean ``vllm:request_time_per_output_token_seconds``).

Speculative decoding counters exist only when a ``--speculative-config`` is
given, as in vLLM, and count as vLLM counts: a *draft* is a decoding request
that had at least one draft token in a step; accepted tokens per position
(0-based ``position`` label) count the requests that accepted that position.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

ENGINE = "0"
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
"""vLLM's ``FinishReason`` strings: every one is exported from the start, as vLLM does."""

REQUEST_LATENCY_BUCKETS = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0),
    *(120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
TIME_TO_FIRST_TOKEN_BUCKETS = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0),
    *(7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
INTER_TOKEN_LATENCY_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0),
    *(7.5, 10.0, 20.0, 40.0, 80.0),
)
ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)


def request_tokens_buckets(max_model_len: int) -> list[float]:
    """vLLM's 1-2-5 series up to ``max_model_len`` (``build_1_2_5_buckets``)."""
    out: list[float] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_model_len:
                return out
            out.append(float(m * scale))
        scale *= 10


@dataclass(frozen=True)
class FinishedRequest:
    """What vLLM observes when a request finishes (seconds, wall clock)."""

    finish_reason: str
    e2e_latency: float
    queued_time: float
    prefill_time: float
    decode_time: float
    inference_time: float
    prompt_tokens: int
    generation_tokens: int
    max_tokens_param: int | None

    @property
    def mean_time_per_output_token(self) -> float:
        """Decode time over the tokens after the first (vLLM's definition; 0 for one token)."""
        if self.generation_tokens <= 1:
            return 0.0
        return self.decode_time / (self.generation_tokens - 1)


class VllmMetrics:
    """The series, in a registry of the server's own."""

    def __init__(self, model_name: str, *, max_model_len: int, num_spec_tokens: int | None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        names = ["model_name", "engine"]
        lv = (model_name, ENGINE)
        self._lv = lv

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, names, registry=r).labels(*lv)

        def hist(name: str, doc: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, doc, names, buckets=buckets, registry=r).labels(*lv)

        self.running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.",
            names, registry=r, multiprocess_mode="mostrecent",
        ).labels(*lv)  # fmt: skip
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
            names, registry=r, multiprocess_mode="mostrecent",
        ).labels(*lv)  # fmt: skip
        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*names, "finished_reason"],
            registry=r,
        )
        self.success = {reason: success.labels(*lv, reason) for reason in FINISH_REASONS}
        tokens = request_tokens_buckets(max_model_len)
        self.request_prompt_tokens = hist(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.request_generation_tokens = hist(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.request_max_tokens = hist(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
            tokens,
        )  # fmt: skip
        self.iteration_tokens = hist(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
            ITERATION_TOKENS_BUCKETS,
        )  # fmt: skip
        self.ttft = hist(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            TIME_TO_FIRST_TOKEN_BUCKETS,
        )  # fmt: skip
        self.itl = hist(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            INTER_TOKEN_LATENCY_BUCKETS,
        )  # fmt: skip
        self.tpot = hist(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            INTER_TOKEN_LATENCY_BUCKETS,
        )
        self.e2e = hist(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.queue = hist(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.inference = hist(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.prefill = hist(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.decode = hist(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.spec: _SpecCounters | None = None
        if num_spec_tokens is not None:
            self.spec = _SpecCounters(r, names, lv, num_spec_tokens)

    def finished(self, req: FinishedRequest) -> None:
        """One request left the engine."""
        self.success[req.finish_reason].inc()
        self.e2e.observe(req.e2e_latency)
        self.queue.observe(req.queued_time)
        self.prefill.observe(req.prefill_time)
        self.inference.observe(req.inference_time)
        self.decode.observe(req.decode_time)
        self.request_prompt_tokens.observe(req.prompt_tokens)
        self.request_generation_tokens.observe(req.generation_tokens)
        self.tpot.observe(req.mean_time_per_output_token)
        if req.max_tokens_param:
            self.request_max_tokens.observe(req.max_tokens_param)

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)


class _SpecCounters:
    """``vllm:spec_decode_*``: drafts, draft tokens, accepted tokens (total and per position)."""

    def __init__(
        self, r: CollectorRegistry, names: list[str], lv: tuple[str, str], positions: int
    ) -> None:
        self.drafts = Counter(
            "vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", names, registry=r
        ).labels(*lv)
        self.draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", names, registry=r
        ).labels(*lv)
        self.accepted_tokens = Counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", names, registry=r
        ).labels(*lv)
        per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [*names, "position"],
            registry=r,
        )
        self.per_pos = [per_pos.labels(*lv, str(i)) for i in range(positions)]

    def observe(self, proposed: Sequence[int], accepted: Sequence[int]) -> None:
        """One step: per decoding request its draft tokens and accepted count."""
        drafts = tokens = took = 0
        by_pos = [0] * len(self.per_pos)
        for length, n in zip(proposed, accepted, strict=True):
            if length <= 0:
                continue  # vLLM counts no draft for a request that proposed nothing
            drafts += 1
            tokens += length
            took += n
            for i in range(min(n, len(by_pos))):
                by_pos[i] += 1
        if drafts:
            self.drafts.inc(drafts)
            self.draft_tokens.inc(tokens)
            self.accepted_tokens.inc(took)
            for counter, value in zip(self.per_pos, by_pos, strict=True):
                if value:
                    counter.inc(value)
