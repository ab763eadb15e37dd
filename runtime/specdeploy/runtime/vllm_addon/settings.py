"""The add-on's settings, read once from the pod's environment (and an optional file).

The operator's Deployment sets the ``SPECDEPLOY_*`` variables below; their
names are the contract's (``specdeploy.runtime.contract.PodEnv``), which the
operator's builder uses too. Everything else has a default
that works in a pod. A setting that cannot be parsed stops the engine at
start with a message naming the variable: settings are deployment-time
input, unlike the table, which changes under a running engine and must never
crash it.

Variables (a file named by ``SPECDEPLOY_CONFIG_FILE``, JSON or YAML, may hold
the same keys in lower case without the prefix, e.g. ``reload_seconds``;
the environment wins over the file):

``SPECDEPLOY_TABLE_FILE``     table.json of the pool (K schedule, maxK, policy)
``SPECDEPLOY_PROFILE_FILE``   profile.json (adaptive prior); default: beside the table
``SPECDEPLOY_POLICY``         adaptive | table | fixed | off, until the table names one
``SPECDEPLOY_METRICS_PORT``   port of the Prometheus endpoint; unset or 0: none
``SPECDEPLOY_METRICS_ADDR``   address it binds (default 0.0.0.0)
``SPECDEPLOY_POOL``           GPU type of the pool, a label on every metric
``SPECDEPLOY_PROFILE``        SpeculationProfile name, a label on the table info metric
``SPECDEPLOY_RELOAD_SECONDS`` how often the table file is checked (default 5)
``SPECDEPLOY_ALLOWED_K``      the K values the policy may use: empty (default) for
                              the K values of the table vLLM started with (the
                              CUDA-graph shapes), ``all`` for 0..maxK, or ``0,1,3``
``SPECDEPLOY_ADAPTIVE``       JSON object of AdaptiveConfig fields (policy/config.py)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from specdeploy.runtime.contract import ENV_PREFIX, PROFILE_FILE, PodEnv, Policy
from specdeploy.runtime.policy.config import AdaptiveConfig

DEFAULT_RELOAD_SECONDS = 5.0
KEYS = tuple(v.key for v in PodEnv if v is not PodEnv.CONFIG_FILE)
"""Every setting, by its config-file name (``PodEnv`` minus the file's own variable)."""


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the variable."""


@dataclass(frozen=True)
class AddonSettings:
    """What the add-on needs to know about its pod."""

    table_file: Path | None = None
    profile_file: Path | None = None
    policy: str = "adaptive"
    metrics_port: int = 0
    metrics_addr: str = "0.0.0.0"
    pool: str = ""
    profile: str = ""
    reload_seconds: float = DEFAULT_RELOAD_SECONDS
    allowed_k: str = ""
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)

    @property
    def profile_path(self) -> Path | None:
        """The profile file: as configured, else profile.json beside the table."""
        if self.profile_file is not None:
            return self.profile_file
        if self.table_file is None:
            return None
        return self.table_file.with_name(PROFILE_FILE)

    def allowed_k_values(self, started_with: set[int], num_speculative_tokens: int) -> set[int]:
        """The K set the policy may use, given the table's K values at engine start."""
        text = self.allowed_k.strip()
        if not text:
            return set(started_with)
        if text == "all":
            return set(range(num_speculative_tokens + 1))
        values = {int(v) for v in text.split(",")}
        return {k for k in values if k <= num_speculative_tokens}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AddonSettings:
        """Settings from ``env`` (default: os.environ) and the file it may name."""
        env = os.environ if env is None else env
        raw: dict[str, Any] = {}
        config_file = env.get(PodEnv.CONFIG_FILE, "").strip()
        if config_file:
            raw.update(_read_file(Path(config_file)))
        for key in KEYS:
            value = env.get(_name(key))
            if value is not None and value.strip() != "":
                raw[key] = value.strip()
        return _parse(raw)


def _read_file(path: Path) -> dict[str, Any]:
    where = f"{PodEnv.CONFIG_FILE.value}={path}"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise SettingsError(f"{where}: cannot read: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise SettingsError(f"{where}: not valid YAML/JSON: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{where}: expected a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise SettingsError(f"{where}: unknown keys {unknown}; known: {list(KEYS)}")
    return dict(data)


def _parse(raw: dict[str, Any]) -> AddonSettings:
    out: dict[str, Any] = {}
    for key in ("table_file", "profile_file"):
        if key in raw:
            out[key] = Path(str(raw[key]))
    for key in ("metrics_addr", "pool", "profile"):
        if key in raw:
            out[key] = str(raw[key])
    if "policy" in raw:
        out["policy"] = _policy(raw["policy"])
    if "metrics_port" in raw:
        out["metrics_port"] = _port(raw["metrics_port"])
    if "reload_seconds" in raw:
        out["reload_seconds"] = _positive_seconds(raw["reload_seconds"])
    if "allowed_k" in raw:
        out["allowed_k"] = _allowed_k(raw["allowed_k"])
    if "adaptive" in raw:
        out["adaptive"] = _adaptive(raw["adaptive"])
    return AddonSettings(**out)


def _name(key: str) -> str:
    return PodEnv(ENV_PREFIX + key.upper()).value


def _policy(value: object) -> str:
    text = str(value).strip().lower()
    if text not in set(Policy):
        raise SettingsError(
            f"{_name('policy')}: {value!r} is not one of {[p.value for p in Policy]}"
        )
    return text


def _port(value: object) -> int:
    try:
        port = int(str(value))
    except ValueError:
        raise SettingsError(f"{_name('metrics_port')}: {value!r} is not an integer") from None
    if not 0 <= port <= 65535:
        raise SettingsError(f"{_name('metrics_port')}: {port} is not in 0..65535 (0: no endpoint)")
    return port


def _positive_seconds(value: object) -> float:
    try:
        seconds = float(str(value))
    except ValueError:
        raise SettingsError(f"{_name('reload_seconds')}: {value!r} is not a number") from None
    if not seconds > 0 or seconds != seconds:
        raise SettingsError(f"{_name('reload_seconds')}: must be > 0, got {value!r}")
    return seconds


def _allowed_k(value: object) -> str:
    text = str(value).strip()
    if text in ("", "all"):
        return text
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise SettingsError(
            f"{_name('allowed_k')}: {value!r} must be empty, 'all' or K values like '0,1,3'"
        )
    return ",".join(parts)


def _adaptive(value: object) -> AdaptiveConfig:
    where = _name("adaptive")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise SettingsError(f"{where}: not a JSON object: {err}") from None
    if not isinstance(value, dict):
        raise SettingsError(f"{where}: expected an object of AdaptiveConfig fields")
    known = {f.name for f in fields(AdaptiveConfig)}
    unknown = sorted(set(value) - known)
    if unknown:
        raise SettingsError(f"{where}: unknown fields {unknown}; known: {sorted(known)}")
    try:
        return AdaptiveConfig(**value)
    except (TypeError, ValueError) as err:
        raise SettingsError(f"{where}: {err}") from None
