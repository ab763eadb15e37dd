"""An EAGLE head for SmolLM2-135M, trained on CPU once and cached.

vLLM's ``eagle`` method (``EagleLlamaForCausalLM``, vLLM 0.32) drafts with one
decoder layer over ``fc([embed(next token), target hidden state])``: the
layer has no input norm and no final norm, and its output goes straight
into the target's LM head; embeddings and LM head are the target's (the
checkpoint leaves them out, so vLLM shares the target's). For draft
position 2 and later the head's own output stands in for the target's
hidden state. This module reproduces exactly that forward in plain torch,
trains it, and saves it in the layout vLLM loads (``fc.weight``,
``layers.0.*`` with no ``input_layernorm``; a Llama ``config.json`` with one
layer), which runs on the CPU build.

Training is teacher-forced throughout, with no generation: that is what
costs on this CPU (vLLM's CPU build had not finished greedy answers to 280
prompts x 192 tokens after 24 minutes at batch 64 on the shared 2-core
machine; the profiler's batch-16 decode steps take ~1.1 s there):

1. text: ShareGPT first turns with their recorded answers (``answer_tokens``
   of them); MT-Bench is held out for evaluation, as the profiler measures
   on it;
2. transformers (float32) runs the target once over each prompt + answer for
   its last hidden states (after the final norm: what vLLM hands the
   drafter) and its argmax after every prefix (what greedy verification
   accepts);
3. the head at index ``t`` sees (token ``t+1``, hidden ``t``) and learns the
   target's argmax after prefix ``t+1`` (cross-entropy through the frozen
   tied embeddings) plus the target's hidden ``t+1`` (smooth L1, as EAGLE
   does), on answer positions; AdamW, warmup then cosine decay;
4. acceptance per position is measured teacher-forced on the target's own
   greedy answers to MT-Bench first turns (those the ``vllm`` profiler
   backend cached, else transformers answers): draft 1 exactly as vLLM makes
   it, drafts 2-3 by running the head on its own outputs over the
   teacher-forced prefix's KV, which is exact for greedy verification.

Hidden states and labels are cached (``<cache>/eagle-data-*.pt``), so a
recipe that changes only training reuses them. Run it under ``nice`` with
``OMP_NUM_THREADS=1`` on a shared machine; progress goes to stderr.

    python -m e2e.models.eagle       # train (once), print the folder
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import random
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from e2e.models import smollm2, trained

NAME = "smollm2-eagle"
ALIASES = frozenset({NAME})
MARKER = smollm2.MARKER
WEIGHTS = "model.safetensors"
POSITIONS = 3
"""Draft positions measured teacher-forced."""


@dataclass(frozen=True)
class Recipe:
    """Everything that changes the trained head (its identity is derived from it)."""

    prompts: int = 128
    """ShareGPT first turns answered by the target (training data)."""
    max_prompt_tokens: int = 128
    """Rendered prompts longer than this are skipped (they cost features, not labels)."""
    answer_tokens: int = 192
    eval_prompts: int = 24
    """MT-Bench first turns for the teacher-forced measurement (never trained on)."""
    epochs: int = 8
    batch: int = 4
    lr: float = 2e-3
    warmup: int = 20
    reg_weight: float = 0.1
    """Smooth-L1 weight on the predicted hidden state (cross-entropy has weight 1)."""
    seed: int = 0

    def data_key(self) -> str:
        """What the cached generation + features depend on."""
        parts = (self.prompts, self.max_prompt_tokens, self.answer_tokens, self.eval_prompts)
        return "-".join(str(p) for p in (*parts, self.seed))


QUICK = Recipe(prompts=32, answer_tokens=128, eval_prompts=8, epochs=6)
"""A small recipe for the tests: minutes rather than tens of minutes, a head that is
accepted well above an untrained one's rate (tests/model/test_drafts_vllm.py)."""


class EagleUnavailable(RuntimeError):
    """The head cannot be prepared here (target, dataset, vLLM or torch missing)."""


def is_alias(name: str) -> bool:
    return name.lower() in ALIASES


def revision(recipe: Recipe = Recipe()) -> str:
    """The fingerprint's draft revision: target build and a digest of the recipe."""
    digest = hashlib.sha256(json.dumps(asdict(recipe), sort_keys=True).encode()).hexdigest()
    return f"{smollm2.revision()}-eagle1-n{recipe.prompts}-e{recipe.epochs}-{digest[:8]}"


def head_dir(root: Path | None = None, recipe: Recipe = Recipe()) -> Path:
    return (root or smollm2.cache_root()) / f"{NAME}-{revision(recipe)}"


def ensure_head(*, target: Path, root: Path | None = None, recipe: Recipe = Recipe()) -> Path:
    """The trained head's folder, training it on the first call (tens of minutes)."""
    folder = head_dir(root, recipe)
    if smollm2.is_complete(folder):
        return folder
    return smollm2.build_once(
        folder, lambda scratch: train(target, scratch, recipe, data_dir=folder.parent)
    )


def ensure_untrained_head(*, target: Path, root: Path | None = None, seed: int = 0) -> Path:
    """A head of the trained one's shape with its initial weights, for cost measurements.

    A K=0 step's EAGLE pass (the drafter's KV-sync forward, no draft) does the
    same arithmetic whatever the weights hold, so ``bench/k0_anatomy.py``
    times it with this head instead of spending tens of minutes training one.
    Its drafts are worthless: never use it where acceptance matters.
    """
    folder = (root or smollm2.cache_root()) / f"{NAME}-untrained-{smollm2.revision()}-s{seed}"
    if smollm2.is_complete(folder):
        return folder

    def build(scratch: Path) -> None:
        config = json.loads((target / "config.json").read_text())
        params = init_head(Shape.of(config), int(config["intermediate_size"]), seed)
        save_head(params, target, scratch)
        marker = {"model": f"{NAME}-untrained", "method": "eagle", "seed": seed}
        (scratch / MARKER).write_text(json.dumps(marker, indent=2) + "\n")

    return smollm2.build_once(folder, build)


report = trained.report


def head_config(target_config: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's ``config.json``: the target's, with one layer."""
    config = {k: v for k, v in target_config.items() if not k.startswith("_")}
    config["num_hidden_layers"] = 1
    config["architectures"] = ["LlamaForCausalLM"]
    return config


def checkpoint_names(state: dict[str, Any]) -> dict[str, Any]:
    """This module's parameter names to the ones vLLM's ``EagleLlamaForCausalLM`` loads."""
    out = {}
    for name, tensor in state.items():
        if name == "fc":
            out["fc.weight"] = tensor
        elif name == "norm":
            out["layers.0.post_attention_layernorm.weight"] = tensor
        elif name in ("q", "k", "v", "o"):
            out[f"layers.0.self_attn.{name}_proj.weight"] = tensor
        elif name in ("gate", "up", "down"):
            out[f"layers.0.mlp.{name}_proj.weight"] = tensor
        else:
            raise KeyError(f"unknown head parameter {name!r}")
    return out


# --- the head (vLLM's forward, in plain torch) ----------------------------------------


@dataclass(frozen=True)
class Shape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    theta: float
    eps: float

    @classmethod
    def of(cls, config: dict[str, Any]) -> Shape:
        rope = config.get("rope_parameters") or {}
        theta = float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        return cls(
            hidden=hidden,
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads", heads)),
            head_dim=int(config.get("head_dim") or hidden // heads),
            theta=theta,
            eps=float(config.get("rms_norm_eps", 1e-6)),
        )


def init_head(shape: Shape, intermediate: int, seed: int) -> dict[str, Any]:
    """A fresh head: ``fc`` passes the target's hidden state through, the layer starts small.

    (The target's own layers expect a normed input; the EAGLE layer has no
    input norm, and started from the target's last layer it diverged.)
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    h, kv = shape.hidden, shape.kv_heads * shape.head_dim
    sizes = {
        "q": (shape.heads * shape.head_dim, h),
        "k": (kv, h),
        "v": (kv, h),
        "o": (h, shape.heads * shape.head_dim),
        "gate": (intermediate, h),
        "up": (intermediate, h),
        "down": (h, intermediate),
    }
    params = {n: torch.randn(*size, generator=gen) * 0.02 for n, size in sizes.items()}
    params["norm"] = torch.ones(h)
    fc = torch.zeros(h, 2 * h)
    fc[:, :h] = torch.randn(h, h, generator=gen) * 0.02
    fc[:, h:] = torch.eye(h)
    params["fc"] = fc
    return {n: p.float().requires_grad_(True) for n, p in params.items()}


def _rope(x: Any, positions: Any, shape: Shape) -> Any:
    """Neox-style rotary embedding (vLLM's Llama and HF's ``rotate_half``)."""
    import torch

    half = shape.head_dim // 2
    inv = 1.0 / (shape.theta ** (torch.arange(0, half, dtype=torch.float32) / half))
    angles = positions.float()[:, None] * inv[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _rms(x: Any, weight: Any, eps: float) -> Any:
    import torch

    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def head_step(
    params: dict[str, Any],
    shape: Shape,
    embeds: Any,
    hidden: Any,
    positions: Any,
    context: Sequence[tuple[Any, Any, Any]] = (),
) -> tuple[Any, Any, Any]:
    """One head forward over ``n`` inputs; returns (output hidden, keys, values).

    Without ``context``: one sequence, causal attention over itself. With
    it: ``n`` independent drafts, input ``i`` attending to the keys/values
    of each context entry ``(keys, values, mask)`` (``mask[i, j]`` says
    whether input ``i`` may see key ``j``) and to its own key.
    """
    import torch

    n = embeds.shape[0]
    x = torch.cat((embeds, hidden), dim=-1) @ params["fc"].T
    q = (x @ params["q"].T).view(n, shape.heads, shape.head_dim)
    k = (x @ params["k"].T).view(n, shape.kv_heads, shape.head_dim)
    v = (x @ params["v"].T).view(n, shape.kv_heads, shape.head_dim)
    q, k = _rope(q, positions, shape), _rope(k, positions, shape)
    group = shape.heads // shape.kv_heads
    scale = 1.0 / math.sqrt(shape.head_dim)
    if not context:
        attn = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1),
            k.repeat_interleave(group, dim=1).transpose(0, 1),
            v.repeat_interleave(group, dim=1).transpose(0, 1),
            is_causal=True,
        ).transpose(0, 1)
    else:
        scores, values = [], []
        for keys, vals, mask in context:
            kk = keys.repeat_interleave(group, dim=1)  # (m, heads, d)
            s = torch.einsum("nhd,mhd->nhm", q, kk) * scale
            scores.append(s.masked_fill(~mask[:, None, :], float("-inf")))
            values.append(vals.repeat_interleave(group, dim=1))
        own = k.repeat_interleave(group, dim=1)
        scores.append((q * own).sum(-1, keepdim=True) * scale)
        weights = torch.softmax(torch.cat(scores, dim=-1), dim=-1)
        attn = torch.zeros_like(q)
        offset = 0
        for vals in values:
            m = vals.shape[0]
            attn = attn + torch.einsum("nhm,mhd->nhd", weights[..., offset : offset + m], vals)
            offset += m
        attn = attn + weights[..., offset:] * v.repeat_interleave(group, dim=1)
    residual = x + attn.reshape(n, -1) @ params["o"].T
    h = _rms(residual, params["norm"], shape.eps)
    mlp = (torch.nn.functional.silu(h @ params["gate"].T) * (h @ params["up"].T)) @ params["down"].T
    return mlp + residual, k, v


# --- training -------------------------------------------------------------------


@dataclass
class Example:
    ids: list[int]
    prompt_len: int


def train(target_dir: Path, out: Path, recipe: Recipe, *, data_dir: Path) -> None:
    """Generate, featurize, train, evaluate and save (module docstring)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError as err:
        raise EagleUnavailable(f"training the head needs torch and transformers: {err}") from err
    started = time.perf_counter()
    torch.manual_seed(recipe.seed)
    data_file = data_dir / f"eagle-data-{smollm2.revision()}-{recipe.data_key()}.pt"
    if data_file.is_file():
        _log(f"reusing features and labels from {data_file}")
        data = torch.load(data_file)
    else:
        examples = training_text(target_dir, recipe)
        target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
        rows = featurize(target, [e.ids for e in examples["train"] + examples["eval"]])
        n = len(examples["train"])
        data = {
            "train": _with_features(examples["train"], rows[:n]),
            "eval": _with_features(examples["eval"], rows[n:]),
            "eval_source": examples["eval_source"],
            "minutes_features": (time.perf_counter() - started) / 60,
        }
        del target
        tmp = data_file.with_suffix(".tmp")
        torch.save(data, tmp)
        tmp.rename(data_file)
    target_config = json.loads((target_dir / "config.json").read_text())
    shape = Shape.of(target_config)
    target_state = _safetensors().load_file(str(target_dir / WEIGHTS))
    embed = target_state["model.embed_tokens.weight"].float()
    params = init_head(shape, int(target_config["intermediate_size"]), recipe.seed)
    del target_state
    trained_s = time.perf_counter()
    losses = fit(params, shape, embed, data["train"], recipe)
    trained_s = time.perf_counter() - trained_s
    acceptance, samples = evaluate(params, shape, embed, data["eval"], POSITIONS)
    _log(f"teacher-forced acceptance {[round(a, 3) for a in acceptance]} ({samples} drafts)")
    save_head(params, target_dir, out)
    answer_tokens = sum(len(ids) - p for ids, p, _, _ in data["train"])
    marker = {
        "model": NAME,
        "method": "eagle",
        "revision": revision(recipe),
        "target": smollm2.HUB_NAME,
        "recipe": asdict(recipe),
        "acceptance_per_position": [round(a, 4) for a in acceptance],
        "acceptance_samples": samples,
        "acceptance_measured_on": data["eval_source"],
        "final_loss": round(sum(losses[-20:]) / max(1, len(losses[-20:])), 4),
        "train_sequences": len(data["train"]),
        "train_answer_tokens": answer_tokens,
        "minutes_features": round(float(data["minutes_features"]), 2),
        "minutes_training": round(trained_s / 60, 2),
        "minutes_this_run": round((time.perf_counter() - started) / 60, 2),
    }
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def _with_features(examples: Sequence[Example], rows: Sequence[tuple[Any, Any]]) -> list[Any]:
    return [(e.ids, e.prompt_len, f, lab) for e, (f, lab) in zip(examples, rows, strict=True)]


def save_head(params: dict[str, Any], target_dir: Path, out: Path) -> None:
    """The checkpoint vLLM's ``eagle`` method loads: bf16 weights, one-layer config, tokenizer."""
    import torch

    save_file = _safetensors().save_file
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.bfloat16).contiguous() for k, v in params.items()}
    save_file(checkpoint_names(state), str(out / WEIGHTS), metadata={"format": "pt"})
    target_config = json.loads((target_dir / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(head_config(target_config), indent=2) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (target_dir / name).is_file():
            shutil.copy(target_dir / name, out / name)


def training_text(target_dir: Path, recipe: Recipe) -> dict[str, Any]:
    """ShareGPT first turns with their recorded answers (train); MT-Bench greedy answers (eval).

    The evaluation text is the target's own greedy answers to MT-Bench's
    first turns, as the ``vllm`` profiler backend cached them (vLLM, bf16,
    192 tokens); where that cache is missing, transformers answers greedily.
    """
    from transformers import AutoTokenizer

    from specdeploy.runtime.profiler.datasets import DatasetUnavailable, load_conversations

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    try:
        share = load_conversations("sharegpt", limit=recipe.prompts * 6)
        bench = load_conversations("mt-bench", limit=recipe.eval_prompts)
    except DatasetUnavailable as err:
        raise EagleUnavailable(f"training data: {err.reason}") from err
    random.Random(recipe.seed).shuffle(share)
    train: list[Example] = []
    for conversation in share:
        if not conversation.answers or not conversation.answers[0].strip():
            continue
        prompt = _render(tokenizer, conversation.messages(0))
        if len(prompt) > recipe.max_prompt_tokens:
            continue
        chat = [
            *conversation.messages(0),
            {"role": "assistant", "content": conversation.answers[0]},
        ]
        ids = _render(tokenizer, chat, generation_prompt=False)
        if ids[: len(prompt)] != prompt or len(ids) - len(prompt) < 8:
            continue
        train.append(Example(ids[: len(prompt) + recipe.answer_tokens], len(prompt)))
        if len(train) == recipe.prompts:
            break
    cached = _profiler_answers()
    if cached and all(c.id in cached for c in bench):
        source = f"MT-Bench first turns ({len(bench)}), the profiler's cached vLLM greedy answers"
        evals = []
        for c in bench:
            prompt = _render(tokenizer, c.messages(0))
            chat = [*c.messages(0), {"role": "assistant", "content": cached[c.id]}]
            ids = _render(tokenizer, chat, generation_prompt=False)
            evals.append(Example(ids, len(prompt)))
    else:
        source = f"MT-Bench first turns ({len(bench)}), transformers greedy answers"
        evals = _hf_answers(target_dir, [_render(tokenizer, c.messages(0)) for c in bench])
    _log(f"{len(train)} ShareGPT conversations for training; evaluation: {source}")
    return {"train": train, "eval": evals, "eval_source": source + ", teacher-forced"}


def _profiler_answers() -> dict[str, str]:
    """The ``vllm`` backend's cached greedy answers to MT-Bench first turns (192 tokens)."""
    folder = smollm2.cache_root().parent / "answers"
    for path in sorted(folder.glob("*SmolLM2-135M-Instruct*-mt-bench-192.json")):
        data: dict[str, str] = json.loads(path.read_text())
        return data
    return {}


def _render(tokenizer: Any, messages: Any, *, generation_prompt: bool = True) -> list[int]:
    ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=generation_prompt, tokenize=True
    )
    if hasattr(ids, "keys"):
        ids = ids["input_ids"]
    return [int(t) for t in ids]


def _hf_answers(target_dir: Path, prompts: list[list[int]], max_new: int = 192) -> list[Example]:
    """Greedy answers with transformers, one prompt at a time (no padding to get wrong)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    out = []
    for prompt in prompts:
        with torch.no_grad():
            row = model.generate(
                input_ids=torch.tensor([prompt]), max_new_tokens=max_new, do_sample=False
            )[0]
        out.append(Example([int(t) for t in row.tolist()], len(prompt)))
    return out


def featurize(target: Any, sequences: Sequence[list[int]], batch: int = 4) -> list[tuple[Any, Any]]:
    """Per sequence: the target's last hidden states (after the final norm, float32)
    and its argmax after every prefix (what greedy verification accepts)."""
    import torch

    embed = target.get_input_embeddings().weight
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    rows: list[Any] = [None] * len(sequences)
    done_tokens, total = 0, sum(len(s) for s in sequences)
    began = time.perf_counter()
    for start in range(0, len(order), batch):
        chunk = order[start : start + batch]
        width = max(len(sequences[i]) for i in chunk)
        ids = torch.tensor([sequences[i] + [0] * (width - len(sequences[i])) for i in chunk])
        mask = torch.tensor(
            [[1] * len(sequences[i]) + [0] * (width - len(sequences[i])) for i in chunk]
        )
        with torch.no_grad():
            hidden = target.model(input_ids=ids, attention_mask=mask).last_hidden_state
            for row, i in enumerate(chunk):
                feats = hidden[row, : len(sequences[i])].clone()
                rows[i] = (feats, (feats @ embed.T).argmax(-1))
                done_tokens += len(sequences[i])
        if (start // batch) % 10 == 0:
            rate = done_tokens / (time.perf_counter() - began)
            _log(f"features {done_tokens}/{total} tokens ({rate:.0f} tok/s)")
    return rows


def _answer_slice(ids: Sequence[int], prompt_len: int) -> tuple[int, int]:
    """Head indices ``t`` that are drafted: from the prompt's last position, with a label t+1."""
    return prompt_len - 1, len(ids) - 2


def fit(
    params: dict[str, Any],
    shape: Shape,
    embed: Any,
    examples: Sequence[tuple[list[int], int, Any, Any]],
    recipe: Recipe,
) -> list[float]:
    """AdamW with warmup and cosine decay; cross-entropy + smooth L1 on answer positions."""
    import torch

    optimizer = torch.optim.AdamW(list(params.values()), lr=recipe.lr, weight_decay=0.0)
    order = [i for i, (ids, p, _, _) in enumerate(examples) if len(ids) - p >= 3]
    steps = recipe.epochs * math.ceil(len(order) / recipe.batch)

    def factor(step: int) -> float:
        if step < recipe.warmup:
            return (step + 1) / recipe.warmup
        return 0.5 * (1 + math.cos(math.pi * min(step, steps) / steps))

    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    rng = random.Random(recipe.seed)
    losses: list[float] = []
    began = time.perf_counter()
    for epoch in range(recipe.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), recipe.batch):
            total_ce, total_reg, count = 0.0, 0.0, 0
            optimizer.zero_grad()
            parts = []
            for i in order[start : start + recipe.batch]:
                parts.append(_sequence_loss(params, shape, embed, *examples[i]))
            count = sum(int(n) for _, _, n in parts)
            ce = sum(c for c, _, _ in parts) / count
            reg = sum(r for _, r, _ in parts) / count
            loss = ce + recipe.reg_weight * reg
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(params.values()), 1.0)
            optimizer.step()
            schedule.step()
            total_ce, total_reg = float(ce.detach()), float(reg.detach())
            losses.append(total_ce)
            if len(losses) % 10 == 0 or len(losses) == steps:
                rate = (time.perf_counter() - began) / len(losses)
                _log(
                    f"epoch {epoch + 1} step {len(losses)}/{steps} ce {total_ce:.3f} "
                    f"reg {total_reg:.4f} ({rate:.1f} s/step)"
                )
    return losses


def _sequence_loss(
    params: dict[str, Any],
    shape: Shape,
    embed: Any,
    ids: list[int],
    prompt_len: int,
    feats: Any,
    labels: Any,
) -> tuple[Any, Any, int]:
    """Summed cross-entropy and smooth-L1 over one sequence's drafted positions, and their count."""
    import torch

    tokens = torch.tensor(ids)
    n = len(ids) - 1
    out, _, _ = head_step(params, shape, embed[tokens[1:]], feats[:n], torch.arange(n))
    lo, hi = _answer_slice(ids, prompt_len)
    picked = out[lo:hi]
    logits = picked @ embed.T
    ce = torch.nn.functional.cross_entropy(logits, labels[lo + 1 : hi + 1], reduction="sum")
    reg = (
        torch.nn.functional.smooth_l1_loss(picked, feats[lo + 1 : hi + 1], reduction="none")
        .mean(-1)
        .sum()
    )
    return ce, reg, hi - lo


def evaluate(
    params: dict[str, Any],
    shape: Shape,
    embed: Any,
    examples: Sequence[tuple[list[int], int, Any, Any]],
    positions: int,
) -> tuple[list[float], int]:
    """Conditional acceptance per position, teacher-forced, as vLLM drafts (module docstring).

    Drafting after prefix ``t`` (``t`` from the prompt's last position): draft
    1 is the head at index ``t`` on (token t+1, target hidden t); draft ``p``
    runs the head at position ``t+p-1`` on (draft p-1, the head's previous
    output), attending to the teacher-forced keys up to ``t`` and its own
    earlier drafts. Greedy verification accepts draft ``p`` when it equals
    the target's argmax after prefix ``t+p`` (teacher-forced on the text).
    """
    import torch

    tried = [0] * positions
    accepted = [0] * positions
    with torch.no_grad():
        for ids, prompt_len, feats, labels in examples:
            tokens = torch.tensor(ids)
            n = len(ids) - 1
            out, keys, values = head_step(
                params, shape, embed[tokens[1:]], feats[:n], torch.arange(n)
            )
            lo = prompt_len - 1
            starts = torch.arange(lo, n)
            alive = torch.ones(len(starts), dtype=torch.bool)
            visible = torch.arange(n)[None, :] <= starts[:, None]
            context: list[tuple[Any, Any, Any]] = [(keys, values, visible)]
            hidden = out[starts]
            for p in range(positions):
                target_index = starts + p + 2
                valid = alive & (target_index < len(ids))
                draft = (hidden @ embed.T).argmax(-1)
                ok = valid & (draft == labels[(target_index - 1).clamp(max=len(ids) - 1)])
                tried[p] += int(valid.sum())
                accepted[p] += int(ok.sum())
                alive = ok
                if p + 1 == positions or not bool(alive.any()):
                    break
                hidden, k, v = head_step(
                    params, shape, embed[draft], hidden, starts + p + 1, context
                )
                eye = torch.eye(len(starts), dtype=torch.bool)
                context.append((k, v, eye))
    return trained.rates(accepted, tried), tried[0]


def _safetensors() -> Any:
    """``safetensors.torch`` (untyped, and only where torch is)."""
    return importlib.import_module("safetensors.torch")


def _log(message: str) -> None:
    trained.log("eagle", message)


def main(argv: list[str] | None = None) -> int:
    """Train (once) and print the folder and its report."""
    return trained.main(
        "eagle",
        lambda target, root: ensure_head(target=target, root=root),
        (EagleUnavailable,),
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
