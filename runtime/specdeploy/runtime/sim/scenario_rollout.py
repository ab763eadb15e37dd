"""RL rollout: 256 requests arrive at once and the batch drains to one straggler.

Reinforcement-learning generation submits a batch of prompts and waits for
the last answer: the makespan is what counts, and with long-tailed output
lengths most of it is spent at small batch sizes with long contexts (a
straggler's context grows to thousands of tokens, which a profile made at
chat contexts never saw). Prompts are lognormal with median 512, outputs
lognormal with median 600 and sigma 1 clipped at 16k: no arrivals after
t = 0.

Policies: vanilla, fixed K, the table, adaptive, and the oracle: per step
the K with the most tokens per second from the true cost at the live state
(``oracles.StateOracle``), the right objective for a drain (the stragglers'
speed). Figures per seed: the makespan, tokens/s over it (no idle time in
a rollout), mean K, and the share of the makespan spent at batch size <= 16.
All figures are modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specdeploy.runtime.sim.compare import Comparison, figures
from specdeploy.runtime.sim.scenario_common import (
    Figures,
    Progress,
    ScenarioOutput,
    mean_bs,
    over_seeds,
)
from specdeploy.runtime.sim.workload import Lengths, Rollout

ROLLOUT_REQUESTS = 256
ROLLOUT_PROMPT = Lengths(median=512.0, sigma=0.5, lo=32, hi=4096)
ROLLOUT_OUTPUT = Lengths(median=600.0, sigma=1.0, lo=16, hi=16384)
SMALL_BATCH = 16


def rollout_workload(requests: int = ROLLOUT_REQUESTS) -> Rollout:
    return Rollout(requests, ROLLOUT_PROMPT, ROLLOUT_OUTPUT)


def compare_rollout(
    cmp: Comparison,
    policies: Sequence[str],
    *,
    requests: int = ROLLOUT_REQUESTS,
    progress: Progress = None,
) -> ScenarioOutput:
    """Every policy drains the same rollout on each seed."""
    workload = rollout_workload(requests)

    def run_one(name: str, seed: int) -> Figures:
        r = cmp.drain(name, workload, seed=seed)
        assert r.trace is not None
        small = r.trace.seconds[r.trace.batch_size <= SMALL_BATCH].sum()
        return figures(
            r,
            makespan_s=r.end_time,
            steps=r.steps,
            completed=r.completed_requests,
            share_at_small_batch=float(small) / r.sim_seconds if r.sim_seconds else 0.0,
        )

    rows = over_seeds(
        cmp, policies, run_one, batch_size=mean_bs, label="rollout: ", progress=progress
    )
    info: dict[str, Any] = {
        "name": "rollout",
        "requests": requests,
        "prompt": {"median": ROLLOUT_PROMPT.median, "sigma": ROLLOUT_PROMPT.sigma},
        "output": {
            "median": ROLLOUT_OUTPUT.median,
            "sigma": ROLLOUT_OUTPUT.sigma,
            "max": ROLLOUT_OUTPUT.hi,
        },
        "objective": "makespan (tokens/s over it); oracle: per-step true-cost argmax",
    }
    return rows, info
