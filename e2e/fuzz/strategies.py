"""Hypothesis strategies for SpeculativeDeployment specs, drawn from the CRD schema.

One walk over the schema (``schema.spec_schema``) draws every field from its
type, bounds, pattern and enum. Each spec first draws a *mutation rate*: 0
(a spec the schema accepts), small (one or two fields pushed past a bound)
or large (many). Leaves then sit at their edges more often than in the
middle: strings at minLength, at maxLength and one past; integers at
minimum, maximum and one past; arrays empty, full and overfull; an enum's
value in another case or unknown. Where a field's meaning matters more than
its type, a domain strategy replaces the generic one (``OVERRIDES``): flags
in the spellings vLLM's parser accepts, annotation and label keys at the
limits of their grammar, toleration combinations the API server refuses on
pods, GPU types, batch sizes out of order, Secret names that are not DNS
names. Unicode, whitespace and control characters appear in every free
string.

Every spec's node selector carries ``HOLD``, a label no node has, so no
profiling or serving pod is ever scheduled: the run stays bounded and the
profiler never runs (``landing.py`` writes profiles instead).
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from e2e.fuzz.schema import Node, spec_schema

Draw = Callable[..., Any]
HOLD = ("specdeploy-fuzz/hold", "true")
"""A node-selector label no node carries: pods stay Pending, nothing is profiled."""
GPU_TYPES = ("NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S")
PROFILES = ((0, 0), (0, 0), (0, 5), (0, 20), (3, 10), (10, 20), (30, 40))
"""(per mille of leaves pushed past a schema bound, percent of odd-but-typed values):
about a third of the specs are clean, the rest break a little or a lot."""
REPAIR_PERCENT = 60
"""How often the cross-field rules (CEL and validate) are made to hold after drawing."""


@dataclass(frozen=True)
class Walk:
    """What a walk knows: how often to break a bound, how often to pick an odd value."""

    rate: int
    odd_percent: int = 0

    def breaks(self, draw: Draw) -> bool:
        return self.rate > 0 and bool(draw(st.integers(0, 999)) < self.rate)

    def odd(self, draw: Draw) -> bool:
        return self.odd_percent > 0 and bool(draw(st.integers(0, 99)) < self.odd_percent)


def _pick(draw: Draw, *options: Any) -> Any:
    return draw(st.sampled_from(options))


# --- free text ---------------------------------------------------------------

NASTY = (
    "",
    " ",
    "\t",
    "a b",
    " leading",
    "trailing ",
    "x\ny",
    "\x00",
    "é",
    "模型",
    "🤖",
    "\u202e",
    "a/b/c",
    "../../etc/passwd",
    "$(id)",
    "${HOME}",
    '"quoted"',
    "--flag",
    "-f",
    "--flag=value",
    "UPPER",
    "a.b",
    "a_b",
)


def _text(draw: Draw, walk: Walk, *, min_size: int, max_size: int | None) -> str:
    """Any unicode, with the nasty classics and the length edges over-represented."""
    top = max_size if max_size is not None else 300
    choice = draw(st.integers(0, 9)) if walk.odd(draw) else 9
    if choice == 0:
        return str(_pick(draw, *NASTY))
    if choice == 1:
        return "a" * top if not walk.breaks(draw) else "a" * (top + 1)
    if choice == 2:
        return str(draw(st.text(min_size=min_size, max_size=min(top, 40))))
    if choice == 3 and walk.breaks(draw):
        return "a" * max(0, min_size - 1)
    size = draw(st.integers(max(min_size, 1), max(min_size, 1, min(top, 24))))
    return "".join(
        draw(
            st.lists(
                st.sampled_from(string.ascii_lowercase + "-_./:0123456789"),
                min_size=size,
                max_size=size,
            )
        )
    )


def _fill_char(pattern: str) -> str | None:
    compiled = re.compile(pattern)
    return next((c for c in "aA0" if compiled.fullmatch(c * 3)), None)


def _string(draw: Draw, node: Node, walk: Walk) -> str:
    low = int(node.get("minLength", 0))
    high = node.get("maxLength")
    if "enum" in node:
        return str(_enum(draw, node["enum"], walk))
    pattern = node.get("pattern")
    if pattern and not walk.breaks(draw):
        fill = _fill_char(pattern)
        if high is not None and fill and draw(st.integers(0, 3)) == 0:
            return fill * int(high)
        drawn = draw(st.from_regex(pattern, fullmatch=True).filter(lambda s: len(s) >= low))
        return str(drawn)[: int(high)] if high is not None else str(drawn)
    return _text(draw, walk, min_size=low, max_size=None if high is None else int(high))


def _enum(draw: Draw, values: list[Any], walk: Walk) -> Any:
    if walk.breaks(draw):
        value = str(_pick(draw, *values))
        return _pick(draw, value.upper(), value.capitalize(), value + " ", "unknown", "")
    return _pick(draw, *values)


def _integer(draw: Draw, node: Node, walk: Walk) -> int:
    low = node.get("minimum")
    high = node.get("maximum")
    if walk.breaks(draw):
        edges = [-1, 2**31, 2**53]
        edges += [int(low) - 1] if low is not None else []
        edges += [int(high) + 1] if high is not None else []
        return int(_pick(draw, *edges))
    lo = int(low) if low is not None else -(2**31)
    hi = int(high) if high is not None else 2**31
    edges = [lo, hi, min(max(0, lo), hi), min(max(1, lo), hi)]
    if draw(st.booleans()):
        return int(_pick(draw, *edges))
    return int(draw(st.integers(lo, hi)))


def _number(draw: Draw, node: Node, walk: Walk) -> float:
    """A float within the schema's bounds, or just outside them.

    OpenAPI v3.0 as CRDs state it: ``exclusiveMinimum: true`` makes ``minimum`` itself
    invalid (pydantic's ``gt``).
    """
    low, high = node.get("minimum"), node.get("maximum")
    exclusive = bool(node.get("exclusiveMinimum")) and low is not None
    if walk.breaks(draw):
        edges = [-1.0, 1e308]
        edges += [float(low) - 1] if low is not None else []
        edges += [float(low)] if exclusive and low is not None else []  # the bound itself is out
        edges += [float(high) + 1] if high is not None else []
        return float(_pick(draw, *edges))
    lo = float(low) if low is not None else -1e9
    hi = float(high) if high is not None else 1e9
    if exclusive:
        lo += max(abs(lo), 1.0) * 1e-6
    return float(draw(st.floats(lo, hi, allow_nan=False, allow_infinity=False)))


# --- domain strategies ---------------------------------------------------------


MANAGED_SPELLINGS = (
    "--speculative-config={}",
    '--speculative_config={"method":"ngram"}',
    "--speculative-config.num_speculative_tokens=8",
    "--scheduler-cls=x.Y",
    "--Scheduler_Cls=x.Y",
    "--port=9000",
    "--PORT",
    "--host=0.0.0.0",
    "--uds=/tmp/s",
    "--headless",
    "-tp",
    "-tp=2",
    "-dp",
    "--tensor_parallel_size=2",
    "--data-parallel-size=2",
    "--served-model-name=x",
    "--model=x",
    "--revision=main",
    "--dtype=half",
    "--shutdown-timeout=1",
    " --port=1",
)
ORDINARY_FLAGS = (
    "--max-model-len=8192",
    "--max_model_len=4096",
    "--enable-prefix-caching",
    "--gpu-memory-utilization=0.9",
    "--compilation-config.level=3",
    "--limit-mm-per-prompt",
    '{"a": 1}',
    "8192",
    "-O3",
    "--x",
    "-x",
    "--x=y",
    "--x.y_z=1",
    "--",
    "-",
    "--=",
    "--ünïcode",
)


def extra_arg(draw: Draw, walk: Walk) -> str:
    choice = draw(st.integers(0, 9)) if walk.odd(draw) else 9
    if choice == 0 or (choice == 1 and walk.breaks(draw)):
        return str(_pick(draw, *MANAGED_SPELLINGS))
    if choice == 2:
        return "--x=" + "a" * (4096 - 4 + (1 if walk.breaks(draw) else 0))
    if choice == 3:
        return _text(draw, walk, min_size=1, max_size=4096)
    return str(_pick(draw, *ORDINARY_FLAGS))


DNS_LABEL = "[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"


def dns_subdomain(draw: Draw, walk: Walk, *, limit: int = 253) -> str:
    """A DNS-1123 subdomain, often at its length limit; sometimes one past it, or not one."""
    choice = draw(st.integers(0, 7)) if walk.odd(draw) else 7
    if walk.breaks(draw):
        return str(
            _pick(draw, "a" * (limit + 1), "Upper", "under_score", "-lead", "trail-", "a..b", "é")
        )
    if choice == 0:
        labels = ["a" * 63, "b" * 63, "c" * 63, "d" * 61]
        return ".".join(labels)[:limit]
    if choice == 1:
        return "a" * 63
    if choice == 2:
        return "a" * 64
    return str(draw(st.from_regex(rf"{DNS_LABEL}(\.{DNS_LABEL}){{0,2}}", fullmatch=True)))[:limit]


def qualified_key(draw: Draw, walk: Walk) -> str:
    """An annotation or label key: ``[prefix/]name``; prefix a DNS subdomain <= 253, name <= 63."""
    choice = draw(st.integers(0, 11)) if walk.odd(draw) else draw(st.sampled_from((0, 2, 6, 11)))
    if choice == 0:
        return "a" * 63
    if choice == 1:
        return "a" * 64
    if choice == 2:
        return "p" * 253 + "/n"
    if choice == 3:
        return "p" * 254 + "/n"
    if choice == 4:
        return str(_pick(draw, "-bad", "bad-", "a/b/c", "/n", "p/", "a b", "é", "A.B/c", ""))
    if choice == 5:
        return str(draw(st.text(min_size=1, max_size=20)))
    if choice == 6:
        return str(_pick(draw, "sidecar.istio.io/inject", "prometheus.io/scrape", "x_y.z-1"))
    prefix = dns_subdomain(draw, walk, limit=40) + "/" if draw(st.booleans()) else ""
    name = draw(st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?", fullmatch=True))
    return prefix + str(name)


def label_value(draw: Draw, walk: Walk) -> str:
    choice = draw(st.integers(0, 7)) if walk.odd(draw) else draw(st.sampled_from((0, 7)))
    if choice == 0:
        return "v" * 63
    if choice == 1:
        return "v" * 64
    if choice == 2:
        return str(_pick(draw, "", "-v", "v-", "a b", "é", "a/b", "true"))
    return str(
        draw(st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?", fullmatch=True))
    )


def pod_annotations(draw: Draw, walk: Walk) -> dict[str, str]:
    keys = draw(st.lists(st.builds(lambda: None), max_size=4))
    found = {qualified_key(draw, walk): _text(draw, walk, min_size=0, max_size=64) for _ in keys}
    if walk.odd(draw) and draw(st.integers(0, 9)) == 0:
        # Values near the API server's 256 KiB total for a pod's annotations.
        found["big"] = "v" * (256 * 1024 - 3 + draw(st.integers(-2000, 2000)))
    return found


def node_selector(draw: Draw, walk: Walk) -> dict[str, str]:
    keys = draw(st.lists(st.builds(lambda: None), max_size=3))
    found = {qualified_key(draw, walk): label_value(draw, walk) for _ in keys}
    if draw(st.integers(0, 4)) == 0:
        found["nvidia.com/gpu.product"] = str(_pick(draw, *GPU_TYPES))
    return found


def toleration(draw: Draw, walk: Walk) -> dict[str, Any]:
    if not walk.odd(draw):
        return dict(
            _pick(
                draw,
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "pool",
                    "operator": "Equal",
                    "value": "gpu",
                    "effect": "NoExecute",
                    "tolerationSeconds": 30,
                },
                {"operator": "Exists"},
            )
        )
    found: dict[str, Any] = {}
    if draw(st.integers(0, 4)):
        found["key"] = (
            qualified_key(draw, walk)
            if draw(st.booleans())
            else str(_pick(draw, "nvidia.com/gpu", "gpu"))
        )
    if draw(st.booleans()):
        found["operator"] = _enum(draw, ["Exists", "Equal"], walk)
    if draw(st.booleans()):
        found["value"] = label_value(draw, walk)
    if draw(st.booleans()):
        found["effect"] = _enum(draw, ["NoSchedule", "PreferNoSchedule", "NoExecute"], walk)
    if draw(st.integers(0, 3)) == 0:
        found["tolerationSeconds"] = int(_pick(draw, -1, 0, 30, 2**31, 2**53))
    return found


def gpu_type(draw: Draw, walk: Walk, node: Node) -> str:
    if draw(st.booleans()):
        return str(_pick(draw, *GPU_TYPES))
    return _string(draw, node, walk)


def batch_sizes(draw: Draw, walk: Walk) -> list[int]:
    choice = draw(st.integers(0, 7)) if walk.odd(draw) else draw(st.sampled_from((2, 3, 7)))
    if choice == 0:
        return [1, 8, 4]
    if choice == 1:
        return [1, 1]
    if choice == 2:
        return list(range(1, 65)) if not walk.breaks(draw) else list(range(1, 66))
    if choice == 3:
        return [4096] if not walk.breaks(draw) else [4097]
    if choice == 4 and walk.breaks(draw):
        return _pick(draw, [0], [-1], [], [1, 2**31])  # type: ignore[no-any-return]
    sizes = draw(st.lists(st.integers(1, 4096), min_size=1, max_size=12, unique=True))
    return sorted(sizes) if draw(st.integers(0, 5)) else list(sizes)


def model_id(draw: Draw, walk: Walk, node: Node) -> str:
    choice = draw(st.integers(0, 6)) if walk.odd(draw) else draw(st.sampled_from((1, 6)))
    if choice == 0:
        return str(
            _pick(draw, "--trust-remote-code", "-x", " x", "x y", "x\n", "模型/名", "/models/llama")
        )
    if choice == 1:
        return str(_pick(draw, "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B", "a"))
    return _string(draw, node, walk)


def secret_name(draw: Draw, walk: Walk) -> str:
    if walk.odd(draw):
        return str(
            _pick(draw, "HF_Token", "hf_token", "Upper", "a" * 253, "a" * 254, "-x", "a.b", "é")
        )
    return dns_subdomain(draw, walk)


def secret_key(draw: Draw, walk: Walk) -> str:
    if walk.odd(draw):
        return str(_pick(draw, "token", "a/b", "a b", ".", "..", "k" * 253, "é", "-_.x"))
    return str(draw(st.from_regex(r"[-._a-zA-Z0-9]{1,20}", fullmatch=True)))


def image(draw: Draw, walk: Walk, node: Node) -> str:
    if walk.odd(draw):
        return str(
            _pick(
                draw,
                "ghcr.io/x/y:1",
                " ghcr.io/x/y",
                "ghcr.io/x/y ",
                "UPPER/Case:1",
                "a" * 4096,
                "é",
            )
        )
    return _string(draw, node, walk)


Override = Callable[[Draw, Walk, Node], Any]
OVERRIDES: dict[str, Override] = {
    "model.name": model_id,
    "model.revision": model_id,
    "model.servedModelName": model_id,
    "speculation.draftModel": model_id,
    "speculation.draftRevision": model_id,
    "model.tokenSecretRef.name": lambda d, w, n: secret_name(d, w),
    "model.tokenSecretRef.key": lambda d, w, n: secret_key(d, w),
    "vllm.extraArgs[]": lambda d, w, n: extra_arg(d, w),
    "vllm.podAnnotations": lambda d, w, n: pod_annotations(d, w),
    "profiling.podAnnotations": lambda d, w, n: pod_annotations(d, w),
    "nodeSelector": lambda d, w, n: node_selector(d, w),
    "tolerations[]": lambda d, w, n: toleration(d, w),
    "pools[].gpuType": gpu_type,
    "profiling.batchSizes": lambda d, w, n: batch_sizes(d, w),
    "vllm.image": image,
    "profiling.image": image,
}
OPTIONAL_PERCENT = 40
"""How often an optional field is present: its default gets tested too."""


# --- the walk ------------------------------------------------------------------


def value(draw: Draw, node: Node, path: str, walk: Walk) -> Any:
    """A value for ``node`` at ``path`` (dotted, ``[]`` for items; relative to spec)."""
    override = OVERRIDES.get(path)
    if override is not None:
        return override(draw, walk, node)
    kind = node.get("type")
    if walk.breaks(draw) and draw(st.integers(0, 3)) == 0:
        return _pick(draw, "a string", 7, True, [], {}, None)  # the wrong type
    if kind == "object":
        return _object(draw, node, path, walk)
    if kind == "array":
        return _array(draw, node, path, walk)
    if kind == "string":
        return _string(draw, node, walk)
    if kind == "integer":
        return _integer(draw, node, walk)
    if kind == "number":
        return _number(draw, node, walk)
    if kind == "boolean":
        return draw(st.booleans())
    raise ValueError(f"spec.{path}: schema type {kind!r} has no strategy")


def _object(draw: Draw, node: Node, path: str, walk: Walk) -> dict[str, Any]:
    props: dict[str, Node] = node.get("properties", {})
    if not props:
        extra = node.get("additionalProperties", {"type": "string"})
        keys = draw(st.lists(st.text(min_size=1, max_size=10), max_size=3, unique=True))
        return {k: value(draw, extra, f"{path}{{}}", walk) for k in keys}
    required = set(node.get("required", []))
    found: dict[str, Any] = {}
    for name, child in props.items():
        present = name in required or draw(st.integers(0, 99)) < OPTIONAL_PERCENT
        if name in required and walk.breaks(draw):
            present = False
        if present:
            found[name] = value(draw, child, f"{path}.{name}".lstrip("."), walk)
    return found


def _array(draw: Draw, node: Node, path: str, walk: Walk) -> list[Any]:
    low = int(node.get("minItems", 0))
    high = int(node.get("maxItems", 6))
    if walk.breaks(draw):
        size = int(_pick(draw, max(0, low - 1), high + 1))
    else:
        size = int(_pick(draw, low, min(high, low + 1), min(high, 3)))
    return [value(draw, node["items"], f"{path}[]", walk) for _ in range(size)]


def repair(spec: dict[str, Any]) -> dict[str, Any]:
    """Make the cross-field rules hold where the fields have the right shape, so that
    enough specs are valid to exercise the builders (not every spec: the rules
    themselves are under test too)."""
    s = spec.get("speculation")
    if isinstance(s, dict):
        method = s.get("method")
        if method in ("eagle", "eagle3", "draft_model") and "draftModel" not in s:
            s["draftModel"] = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
        if method in ("ngram", "suffix"):
            s.pop("draftModel", None)
        max_k, fixed_k = s.get("maxK"), s.get("fixedK")
        if isinstance(max_k, int) and isinstance(fixed_k, int) and fixed_k > max_k:
            s["fixedK"] = max_k
        if s.get("policy") == "fixed" and "fixedK" not in s:
            s["fixedK"] = 1
    pools = spec.get("pools")
    pool_list: list[Any] = pools if isinstance(pools, list) else []
    for shape in [spec.get("poolDefaults"), *pool_list]:
        replicas = shape.get("replicas") if isinstance(shape, dict) else None
        if isinstance(replicas, dict) and "min" in replicas and "max" in replicas:
            low, high = replicas["min"], replicas["max"]
            if isinstance(low, int) and isinstance(high, int) and low > high:
                replicas["min"], replicas["max"] = high, low
    if pool_list:
        kept: dict[str, Any] = {}
        for pool in pool_list:
            kept.setdefault(repr(pool.get("gpuType") if isinstance(pool, dict) else pool), pool)
        spec["pools"] = list(kept.values())
    profiling = spec.get("profiling")
    if isinstance(profiling, dict):
        if profiling.get("backend") == "sim" and "simPreset" not in profiling:
            profiling["simPreset"] = "h100-llama8b"
        sizes = profiling.get("batchSizes")
        if isinstance(sizes, list) and all(isinstance(x, int) for x in sizes) and sizes:
            profiling["batchSizes"] = sorted(set(sizes))
    vllm = spec.get("vllm")
    if isinstance(vllm, dict):
        grace, stop = vllm.get("terminationGracePeriodSeconds"), vllm.get("preStopSeconds")
        if isinstance(grace, int) and isinstance(stop, int) and grace < stop + 10:
            vllm.pop("terminationGracePeriodSeconds")
    return spec


@st.composite
def specs(draw: Draw) -> dict[str, Any]:
    """One spec, usually near the schema's edges; its node selector always holds pods back."""
    rate, odd = draw(st.sampled_from(PROFILES))
    walk = Walk(rate=int(rate), odd_percent=int(odd))
    spec = _object(draw, spec_schema(), "", walk)
    if draw(st.integers(0, 99)) < REPAIR_PERCENT:
        spec = repair(spec)
    selector = spec.get("nodeSelector")
    spec["nodeSelector"] = {**(selector if isinstance(selector, dict) else {}), HOLD[0]: HOLD[1]}
    return spec


@st.composite
def bodies(draw: Draw) -> dict[str, Any]:
    """A whole SpeculativeDeployment: a name (often long, dotted) and a spec."""
    walk = Walk(rate=int(draw(st.sampled_from((0, 0, 0, 5)))), odd_percent=20)
    return {
        "apiVersion": "specdeploy.io/v1alpha1",
        "kind": "SpeculativeDeployment",
        "metadata": {"name": dns_subdomain(draw, walk)},
        "spec": draw(specs()),
    }
