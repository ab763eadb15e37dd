"""Which simulator preset stands in for a served model, and that preset on the node's GPU.

The local cluster has no GPU, so a serving pod (``vllm_serve``) and a
profiling pod (the ``sim`` profiler backend) both emulate one simulator
preset (``specdeploy.runtime.sim.presets``). The kubelet stand-in calls
``preset_for`` for both kinds of pod, so the profile a pool gets and the pod
that serves with it model the same target, drafter and acceptance.

``preset_for(model, method)`` resolves, first match wins:

1. **exact**: a preset whose target model is ``model`` (case-insensitive)
   and whose drafter is ``method``;
2. **same model, same family**: ``model`` with a drafter of the same family
   (``FAMILIES``: model heads, draft models, lookups), e.g. ``mtp`` on an
   EAGLE preset;
3. **same method**: the family's preferred preset (``FAMILY_DEFAULTS``),
   whatever the model: how the drafter proposes and gets accepted (and how
   ``random`` traffic collapses it) matters more to what the cluster tests
   than the target's size, which only scales the step times;
4. ``DEFAULT_PRESET`` (Llama-3.1-8B with EAGLE-3 on one H200, the example
   deployment's model) for a method the simulator has no family for.

Where several presets match a rule (the same model and drafter on two GPUs,
e.g. ``llama8b-eagle3-h200`` and ``-l40s``), the first by name wins: the GPU
is the node's anyway (``on_gpu``), and serving and profiling must agree.

``on_gpu`` moves a preset onto the node's GPU exactly as the profiler's
``--gpu-type`` does (``dataclasses.replace(preset, gpu=...)``: same model,
TP and drafter, the cost model rebuilt for that GPU). Everything is modelled.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from specdeploy.runtime.sim.hardware import get_gpu
from specdeploy.runtime.sim.presets import PRESETS, Preset, get_preset

DEFAULT_PRESET = "llama8b-eagle3-h200"
"""The preset for a method with no family here (and the family default of model heads)."""

FAMILIES: dict[str, str] = {
    "eagle": "head",
    "eagle3": "head",
    "mtp": "head",
    "medusa": "head",
    "draft_model": "draft",
    "ngram": "lookup",
    "suffix": "lookup",
}
"""vLLM method -> how it drafts: a head on the target (always K drafts), a separate small
model (always K), or a lookup in the context (often fewer drafts, or none)."""

FAMILY_DEFAULTS: dict[str, str] = {
    "head": DEFAULT_PRESET,
    "draft": "llama70b-draft-a100",
    "lookup": "llama8b-ngram-a100",
}


class Match(NamedTuple):
    """A resolved preset and which rule of the module docstring chose it."""

    preset: str
    rule: str
    """``exact``, ``same model and family``, ``same method`` or ``default``."""


def preset_for(model: str, method: str) -> str:
    """The simulator preset that models ``model`` (an HF id) served with ``method``."""
    return resolve(model, method).preset


def resolve(model: str, method: str) -> Match:
    """``preset_for`` with the rule that matched (for the startup log line)."""
    wanted = model.strip().lower()
    family = FAMILIES.get(method)
    same_model = sorted(n for n, p in PRESETS.items() if p.model.name.lower() == wanted)
    for name in same_model:
        if PRESETS[name].drafter.method == method:
            return Match(name, "exact")
    for name in same_model:
        if family is not None and FAMILIES.get(PRESETS[name].drafter.method) == family:
            return Match(name, "same model and family")
    if family is not None:
        return Match(FAMILY_DEFAULTS[family], "same method")
    return Match(DEFAULT_PRESET, "default")


def on_gpu(preset: Preset, gpu_product: str | None) -> Preset:
    """``preset`` on the GPU the node's ``nvidia.com/gpu.product`` names (None: its own).

    Raises ``KeyError`` naming the known GPUs when the simulator has no model of it.
    """
    if not gpu_product:
        return preset
    return dataclasses.replace(preset, gpu=get_gpu(gpu_product))


def emulated_preset(
    model: str, method: str | None, gpu_product: str | None, override: str | None = None
) -> tuple[Preset, Match]:
    """The preset a serving pod emulates: ``override`` or ``preset_for``, on the node's GPU.

    ``method`` None (no speculation configured): any preset of the model (only its
    target's cost counts then: no drafter runs), else ``DEFAULT_PRESET``.
    """
    if override:
        match = Match(override, "SPECDEPLOY_EMULATED_PRESET")
    elif method is None:
        match = _any_of_model(model)
    else:
        match = resolve(model, method)
    return on_gpu(get_preset(match.preset), gpu_product), match


def _any_of_model(model: str) -> Match:
    wanted = model.strip().lower()
    same_model = sorted(n for n, p in PRESETS.items() if p.model.name.lower() == wanted)
    if same_model:
        return Match(same_model[0], "same model (no speculation)")
    return Match(DEFAULT_PRESET, "default")
