"""The baselines: no speculation, a fixed K, and a static table keyed by batch size.

They are what the adaptive policy is measured against, so they do exactly
what their real-world counterparts do and nothing more: ``TablePolicy`` is
vLLM's ``dynamic_sd_lookup`` (raw batch size, no smoothing, clamped at the
end), which is the one that thrashes at a threshold (vLLM #49548).
"""

from __future__ import annotations

from collections.abc import Sequence

from specdeploy.runtime.policy.base import StepRecord
from specdeploy.runtime.profile import ProfileSpec, SpeculationProfile
from specdeploy.runtime.ranges import expand_lookup
from specdeploy.runtime.schedule import derive_schedule


class _Static:
    """Policies that learn nothing: ``observe`` is a no-op."""

    name: str

    def observe(self, step: StepRecord) -> None:
        """Nothing to learn."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class VanillaPolicy(_Static):
    """No speculative decoding; the simulator runs it without any drafting cost."""

    name = "vanilla"

    def choose_k(self, batch_size: int) -> int:
        """Always 0."""
        return 0


class FixedPolicy(_Static):
    """The same K at every batch size (vLLM's plain ``num_speculative_tokens``)."""

    def __init__(self, k: int) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"k must be an integer >= 0, got {k!r}")
        self.k = k
        self.name = f"fixed:{k}"

    def choose_k(self, batch_size: int) -> int:
        """Always ``k``."""
        return self.k


def checked_lookup(lookup: Sequence[int], parameter: str) -> list[int]:
    """A dense lookup as a plain list of non-negative ints, or ValueError naming ``parameter``."""
    values = list(lookup)
    if not values:
        raise ValueError(f"{parameter}: must not be empty")
    for i, k in enumerate(values):
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise ValueError(f"{parameter}[{i}]: K must be an integer >= 0, got {k!r}")
    return values


class TablePolicy(_Static):
    """A static dense table indexed by the raw batch size, like vLLM's ``dynamic_sd_lookup``.

    ``lookup[n]`` is K for n scheduled sequences; sizes past the end take the
    last entry (vLLM's tail rule). No smoothing, no hysteresis: this is the
    baseline that flips K every step when the batch size jitters around a
    threshold.
    """

    name = "table"

    def __init__(self, lookup: Sequence[int]) -> None:
        self.lookup = checked_lookup(lookup, "lookup")
        self._last = len(self.lookup) - 1

    def choose_k(self, batch_size: int) -> int:
        """``lookup[batch_size]``, clamped to the table's ends."""
        if batch_size > self._last:
            return self.lookup[self._last]
        return self.lookup[batch_size if batch_size > 0 else 0]

    @classmethod
    def from_profile(
        cls, profile: SpeculationProfile | ProfileSpec, *, max_batch_size: int | None = None
    ) -> TablePolicy:
        """The profile's schedule (derived when absent), expanded as vLLM expands it."""
        return cls(static_lookup(profile_spec(profile), max_batch_size))


def profile_spec(profile: SpeculationProfile | ProfileSpec) -> ProfileSpec:
    """The spec of a whole document, or the spec itself."""
    return profile.spec if isinstance(profile, SpeculationProfile) else profile


def static_lookup(spec: ProfileSpec, max_batch_size: int | None = None) -> list[int]:
    """vLLM's dense lookup for a profile: its own schedule, or the derived one.

    Length max_batch_size + 1 (default: the profile's largest batch size);
    index 0 is unused, as in vLLM.
    """
    if max_batch_size is None:
        max_batch_size = max(m.batch_size for m in spec.measurements)
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
    max_k = spec.fingerprint.max_k
    if max_k < 1:  # no table without speculation: vLLM would refuse it, K is 0 anyway
        return [0] * (max_batch_size + 1)
    schedule = spec.schedule or derive_schedule(spec, max_batch_size)
    return expand_lookup(list(schedule), max_k, max_batch_size)
