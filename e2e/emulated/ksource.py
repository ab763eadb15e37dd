"""Who chooses K each step: what vLLM 0.32 would do with the pod's command line.

Four cases, from the arguments alone, as vLLM builds them:

* no ``--speculative-config``: plain vLLM (``Vanilla``), K = 0 and no drafter cost;
* a speculative config without ``num_speculative_tokens_per_batch_size``:
  vLLM keeps K = ``num_speculative_tokens`` every step (``FixedK``), and the
  add-on, given as ``--scheduler-cls``, stays off (vLLM builds no lookup to
  replace; the real add-on logs the same);
* a per-batch-size table and another (or no) scheduler class: vLLM's own
  ``dynamic_sd_lookup`` (``VllmLookup``);
* a table and ``--scheduler-cls=specdeploy.runtime.vllm_addon.scheduler_factory``:
  the REAL add-on (``AddonK``), built by ``vllm_addon.assembly.start_addon``
  from the pod's ``SPECDEPLOY_*`` environment: its table watcher hot-reloads
  ``SPECDEPLOY_TABLE_FILE``, its metrics go to ``SPECDEPLOY_METRICS_PORT``,
  ``choose_k`` picks every step's K and ``finish_step`` gets the
  ``StepReading`` vLLM's hook would read. The add-on's vLLM plugin is
  emulated with it: K=0 steps at plain cost but for a stateful drafter's
  K=0 pass (``plain_k0``), which is timed into the add-on's ledger as the
  worker would (``vllm_addon.k0_pass``).

``piecewise`` is whether vLLM runs with a K table set (the cost model charges
piecewise CUDA graphs for it on the V1 model runner only: ``sim/step_time.py``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Protocol

from e2e.emulated.args import ServeArgs
from specdeploy.runtime.contract import SCHEDULER_CLS, PodEnv
from specdeploy.runtime.vllm_addon.assembly import Addon, start_addon
from specdeploy.runtime.vllm_addon.k0_pass import PassLedger, claim_path
from specdeploy.runtime.vllm_addon.settings import AddonSettings
from specdeploy.runtime.vllm_addon.steps import StepReading

log = logging.getLogger("specdeploy.emulated")

LOOPBACK = "127.0.0.1"


class KSource(Protocol):
    """K per step, and what happens after the step."""

    @property
    def speculative(self) -> bool:
        """A drafter is configured (its K=0 pass and bookkeeping are paid even at K=0)."""
        ...

    @property
    def piecewise(self) -> bool:
        """vLLM runs with a K table set."""
        ...

    @property
    def max_k(self) -> int:
        """``num_speculative_tokens`` (0 without speculation)."""
        ...

    @property
    def plain_k0(self) -> bool:
        """The add-on's vLLM plugin runs (``vllm_addon.plain_step``): a K=0 step pays
        no speculation overheads, only a stateful drafter's K=0 pass."""
        ...

    @property
    def k0_ledger(self) -> PassLedger | None:
        """Where the worker would time the drafter's K=0 pass (``vllm_addon.k0_pass``)."""
        ...

    def choose(self, batch_size: int) -> int: ...

    def observe(
        self, batch_size: int, k: int, seconds: float | None, reading: StepReading
    ) -> None: ...

    def close(self) -> None: ...

    def describe(self) -> str:
        """One phrase for the startup log line."""
        ...


class Vanilla:
    speculative = False
    piecewise = False
    plain_k0 = False
    k0_ledger: PassLedger | None = None
    max_k = 0

    def choose(self, batch_size: int) -> int:
        return 0

    def observe(self, batch_size: int, k: int, seconds: float | None, reading: StepReading) -> None:
        return None

    def close(self) -> None:
        return None

    def describe(self) -> str:
        return "no speculation (plain vLLM, K=0)"


class FixedK:
    speculative = True
    piecewise = False
    plain_k0 = False
    k0_ledger: PassLedger | None = None

    def __init__(self, k: int) -> None:
        self.max_k = k

    def choose(self, batch_size: int) -> int:
        return self.max_k

    def observe(self, batch_size: int, k: int, seconds: float | None, reading: StepReading) -> None:
        return None

    def close(self) -> None:
        return None

    def describe(self) -> str:
        return f"fixed K={self.max_k} (no per-batch-size table: vLLM's fixed K, add-on off)"


class VllmLookup:
    speculative = True
    piecewise = True
    plain_k0 = False
    k0_ledger: PassLedger | None = None

    def __init__(self, lookup: list[int], max_k: int) -> None:
        self.lookup = lookup
        self.max_k = max_k
        self._last = len(lookup) - 1

    def choose(self, batch_size: int) -> int:
        return self.lookup[min(batch_size, self._last)]

    def observe(self, batch_size: int, k: int, seconds: float | None, reading: StepReading) -> None:
        return None

    def close(self) -> None:
        return None

    def describe(self) -> str:
        return "vLLM's own per-batch-size table (no add-on scheduler)"


class AddonK:
    speculative = True
    piecewise = True
    plain_k0 = True

    def __init__(self, addon: Addon, max_k: int, k0_ledger: PassLedger | None = None) -> None:
        self.addon = addon
        self.max_k = max_k
        self.k0_ledger = k0_ledger

    def choose(self, batch_size: int) -> int:
        return self.addon.controller.choose_k(batch_size)

    def observe(self, batch_size: int, k: int, seconds: float | None, reading: StepReading) -> None:
        self.addon.controller.finish_step(batch_size, k, seconds, reading)

    def close(self) -> None:
        self.addon.close()

    def describe(self) -> str:
        return "the specdeploy add-on (real controller, table watcher and metrics)"


def addon_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The pod's environment with the add-on's metrics bound to loopback (a warning if moved)."""
    env = dict(environ)
    addr = env.get(PodEnv.METRICS_ADDR.value, "").strip()
    if addr and addr != LOOPBACK:
        log.warning(
            "EMULATED vLLM: %s=%s ignored, the add-on's metrics bind %s only",
            PodEnv.METRICS_ADDR.value,
            addr,
            LOOPBACK,
        )
    env[PodEnv.METRICS_ADDR.value] = LOOPBACK
    return env


def build_ksource(args: ServeArgs, environ: Mapping[str, str] | None = None) -> KSource:
    """The K source the arguments ask for; the add-on is started here (module docstring).

    Raises what vLLM's engine start would: ``ArgsError`` for a bad table,
    ``SettingsError``/``AddonRefused`` from the add-on.
    """
    spec = args.speculation
    if spec is None:
        return Vanilla()
    lookup = spec.lookup(args.max_num_seqs)
    if lookup is None:
        if args.scheduler_cls == SCHEDULER_CLS:
            log.warning(
                "specdeploy: no num_speculative_tokens_per_batch_size in the speculative "
                "config, so vLLM keeps a fixed K and the add-on stays off"
            )
        return FixedK(spec.num_speculative_tokens)
    if args.scheduler_cls != SCHEDULER_CLS:
        return VllmLookup(lookup, spec.num_speculative_tokens)
    env = addon_env(os.environ if environ is None else environ)
    ledger = PassLedger(claim_path(env), create=True)  # the worker's, emulated
    addon = start_addon(
        AddonSettings.from_env(env),
        lookup,
        num_speculative_tokens=spec.num_speculative_tokens,
        environ=env,
    )
    return AddonK(addon, spec.num_speculative_tokens, ledger)
