"""The vLLM add-on: K chosen per engine step by a specdeploy policy, inside vLLM's scheduler.

Start vLLM with ``--scheduler-cls specdeploy.runtime.vllm_addon.scheduler_factory``
and a ``num_speculative_tokens_per_batch_size`` table in its speculative config
(the table must exist for vLLM to build the lookup the add-on replaces). The
``SPECDEPLOY_*`` environment variables configure it (``settings.py``).

Parts: ``settings`` (environment), ``table_source`` (table and profile files
→ a policy), ``watcher`` (hot reload), ``controller`` (K per step, feedback),
``metrics`` (Prometheus endpoint), ``assembly`` (wiring), and ``scheduler``,
the only part that imports vLLM, loaded when vLLM calls the factory.
"""

from __future__ import annotations

from typing import Any


def scheduler_factory(*args: Any, **kwargs: Any) -> Any:
    """vLLM's ``--scheduler-cls`` target: the add-on's sync or async scheduler."""
    from specdeploy.runtime.vllm_addon.scheduler import scheduler_factory as build

    return build(*args, **kwargs)


__all__ = ["scheduler_factory"]
