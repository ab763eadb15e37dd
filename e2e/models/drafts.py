"""A draft model for SmolLM2-135M, distilled on CPU once and cached.

Copies of SmolLM2 cut to fewer layers accept almost nothing untrained
(first 4-20 of 30 layers: 0.05-0.18 at position 1). ``smollm2-distilled``
is the target's first ``LAYERS`` layers, its embeddings and final norm,
trained on the target's own greedy outputs:

1. the target answers MT-Bench's first turns greedily (transformers, batched);
2. on each prompt + answer, the target's argmax at every position is the
   label (teacher forcing: one forward, no sampling);
3. the draft's layers and norm are trained with cross-entropy on those
   labels (the tied embedding / LM head stays frozen: the draft must keep
   the target's vocabulary, and freezing it halves the backward);
4. acceptance per position is measured teacher-forced on held-out
   conversations: position i is accepted, given 1..i-1 were, when the
   draft's argmax at t+i-1 equals the target's, which is exact for greedy
   verification.

The result is an ordinary Llama checkpoint (vLLM's ``draft_model`` method
loads it) with ``specdeploy-model.json`` recording the acceptance reached
and the minutes spent. Later calls return the folder at once.

That recipe (48 conversations x 96 tokens, 2 epochs, 14.4 min) reached only
0.12/0.15/0.09 per position: unusable. ``smollm2-eagle`` (``--method eagle``)
is one EAGLE layer over the target's own hidden states, trained by
``runtime.models.eagle`` (0.23 at position 1 teacher-forced, 0.22 in vLLM:
better, still not usable; profiles/README.md); this module only dispatches
that name to it, so the profiler's ``--draft-model`` knows both.

    python -m e2e.models.drafts      # train (once), print the folder
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from e2e.models import eagle, smollm2, trained

NAME = "smollm2-distilled"
ALIASES = frozenset({NAME}) | eagle.ALIASES
"""Every draft name this module prepares (``eagle.NAME`` needs ``--method eagle``)."""
LAYERS = 4
MARKER = smollm2.MARKER


@dataclass(frozen=True)
class Recipe:
    """Everything that changes the trained draft (its identity is a hash of it)."""

    layers: int = LAYERS
    answer_tokens: int = 96
    conversations: int = 48
    held_out: int = 8
    epochs: int = 2
    batch: int = 8
    lr: float = 5e-4
    seed: int = 0


class DraftUnavailable(RuntimeError):
    """The draft cannot be prepared here (target, dataset or torch missing)."""


def is_alias(name: str) -> bool:
    """Whether ``name`` is a draft this module trains."""
    return name.lower() in ALIASES


def revision(name: str, recipe: Recipe = Recipe()) -> str:
    """The fingerprint's draft revision: target build and training recipe."""
    if eagle.is_alias(name):
        return eagle.revision()
    return f"{smollm2.revision()}-{recipe.layers}l-e{recipe.epochs}-n{recipe.conversations}"


def draft_dir(root: Path | None = None, recipe: Recipe = Recipe()) -> Path:
    return (root or smollm2.cache_root()) / f"{NAME}-{revision(NAME, recipe)}"


def ensure_draft(
    name: str, *, target: Path, root: Path | None = None, recipe: Recipe = Recipe()
) -> Path:
    """The trained draft's folder, training it on the first call (minutes)."""
    if not is_alias(name):
        raise DraftUnavailable(f"no draft named {name!r} (known: {', '.join(sorted(ALIASES))})")
    if eagle.is_alias(name):
        try:
            return eagle.ensure_head(target=target, root=root)
        except eagle.EagleUnavailable as err:
            raise DraftUnavailable(str(err)) from err
    folder = draft_dir(root, recipe)
    if smollm2.is_complete(folder):
        return folder
    return smollm2.build_once(folder, lambda scratch: train(target, scratch, recipe))


report = trained.report


# --- training -------------------------------------------------------------------


def train(target_dir: Path, out: Path, recipe: Recipe) -> None:
    """Generate, label, train, evaluate and save (module docstring)."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as err:
        raise DraftUnavailable(f"training a draft needs torch and transformers: {err}") from err
    started = time.perf_counter()
    torch.manual_seed(recipe.seed)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32).eval()
    prompts = _prompts(tokenizer, recipe)
    _log(f"target answers {len(prompts)} prompts greedily ({recipe.answer_tokens} tokens)")
    answered = _greedy_answers(target, tokenizer, prompts, recipe.answer_tokens)
    sequences = [seq for seq, _ in answered]
    starts = [len(prompt) - 1 for prompt in prompts]
    generated_s = time.perf_counter() - started
    _log(f"labelling {len(sequences)} sequences with the target's argmax")
    labels = [_target_labels(target, seq) for seq in sequences]
    split = len(sequences) - recipe.held_out
    draft = _cut(target, recipe.layers)
    del target
    losses = _fit(draft, sequences[:split], labels[:split], recipe)
    acceptance, samples = _acceptance(
        draft, sequences[split:], labels[split:], starts[split:], positions=8
    )
    draft.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    marker = {
        "model": NAME,
        "revision": revision(NAME, recipe),
        "target": smollm2.HUB_NAME,
        "recipe": asdict(recipe),
        "acceptance_per_position": [round(a, 4) for a in acceptance],
        "acceptance_samples": samples,
        "final_loss": round(losses[-1], 4) if losses else None,
        "minutes_generating": round(generated_s / 60, 2),
        "minutes_total": round((time.perf_counter() - started) / 60, 2),
        "train_tokens": sum(len(s) for s in sequences[:split]),
    }
    (out / MARKER).write_text(json.dumps(marker, indent=2) + "\n")


def _prompts(tokenizer: Any, recipe: Recipe) -> list[list[int]]:
    from specdeploy.runtime.profiler.datasets import DatasetUnavailable, load_conversations

    try:
        conversations = load_conversations("mt-bench", limit=recipe.conversations)
    except DatasetUnavailable as err:
        raise DraftUnavailable(f"training data: {err.reason}") from err
    random.Random(recipe.seed).shuffle(conversations)
    rendered = []
    for conversation in conversations:
        ids = tokenizer.apply_chat_template(
            conversation.messages(0), add_generation_prompt=True, tokenize=True
        )
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        rendered.append([int(t) for t in ids])
    return rendered


def _greedy_answers(
    model: Any, tokenizer: Any, prompts: Sequence[list[int]], max_new: int, batch: int = 16
) -> list[tuple[list[int], int]]:
    """(prompt + the target's greedy answer up to its end-of-turn token, prompt length)."""
    import torch

    pad = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    eos = int(tokenizer.eos_token_id)
    out: list[tuple[list[int], int]] = []
    for start in range(0, len(prompts), batch):
        chunk = prompts[start : start + batch]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.no_grad():
            generated = model.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=max_new,
                do_sample=False,
                pad_token_id=pad,
            )
        for prompt, row in zip(chunk, generated[:, width:].tolist(), strict=True):
            answer = row[: row.index(eos) + 1] if eos in row else row
            out.append((list(prompt) + answer, len(prompt)))
    return out


def _target_labels(model: Any, sequence: list[int]) -> list[int]:
    """The target's argmax after each prefix (what greedy verification accepts)."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([sequence])).logits[0]
    return [int(t) for t in logits.argmax(-1).tolist()]


def _cut(target: Any, layers: int) -> Any:
    """The target's first ``layers`` layers with its embeddings, norm and (tied) head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig.from_dict({**target.config.to_dict(), "num_hidden_layers": layers})
    draft = LlamaForCausalLM(config)
    state = {
        k: v
        for k, v in target.state_dict().items()
        if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers
    }
    draft.load_state_dict(state, strict=True)
    draft.generation_config = target.generation_config
    return draft


def _fit(
    draft: Any, sequences: list[list[int]], labels: list[list[int]], recipe: Recipe
) -> list[float]:
    """Cross-entropy on the target's labels; embeddings (tied head) frozen."""
    import torch

    draft.model.embed_tokens.weight.requires_grad_(False)
    params = [p for p in draft.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0)
    order = list(range(len(sequences)))
    steps = recipe.epochs * math.ceil(len(order) / recipe.batch)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, steps) / steps))
    )
    rng = random.Random(recipe.seed)
    losses: list[float] = []
    draft.train()
    for _ in range(recipe.epochs):
        rng.shuffle(order)
        for start in range(0, len(order), recipe.batch):
            batch = order[start : start + recipe.batch]
            ids, target, mask = _padded([sequences[i] for i in batch], [labels[i] for i in batch])
            logits = draft(input_ids=ids, attention_mask=mask).logits
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            schedule.step()
            losses.append(float(loss.detach()))
            if len(losses) % 10 == 0:
                _log(f"step {len(losses)}/{steps} loss {losses[-1]:.3f}")
    draft.eval()
    return losses


def _padded(sequences: list[list[int]], labels: list[list[int]]) -> tuple[Any, Any, Any]:
    import torch

    width = max(len(s) for s in sequences)
    ids = torch.tensor([s + [0] * (width - len(s)) for s in sequences])
    target = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
    return ids, target, mask


def _acceptance(
    draft: Any,
    sequences: list[list[int]],
    labels: list[list[int]],
    starts: list[int],
    *,
    positions: int,
) -> tuple[list[float], int]:
    """Conditional acceptance per position, teacher-forced on held-out answers.

    Only the answer is drafted: from the prefix that ends the prompt
    (``starts``) to the one before the last token.
    """
    import torch

    matches: list[list[bool]] = []
    with torch.no_grad():
        for sequence, label, start in zip(sequences, labels, starts, strict=True):
            guess = draft(torch.tensor([sequence])).logits[0].argmax(-1).tolist()
            agree = [g == t for g, t in zip(guess, label, strict=True)]
            matches.append(agree[start : len(sequence) - 1])
    return conditional_acceptance(matches, positions)


def conditional_acceptance(
    matches: Sequence[Sequence[bool]], positions: int
) -> tuple[list[float], int]:
    """From per-position agreement to a_i = P(accept i | accepted 1..i-1), from every start.

    ``matches[s][t]`` says whether the draft's argmax after prefix t equals
    the target's. Drafting from position t, draft i is accepted when
    ``matches[t .. t+i-1]`` all hold.
    """
    tried = [0] * positions
    accepted = [0] * positions
    for row in matches:
        for start in range(len(row)):
            for i in range(positions):
                if start + i >= len(row):
                    break
                tried[i] += 1
                if not row[start + i]:
                    break
                accepted[i] += 1
    return trained.rates(accepted, tried), tried[0]


def _log(message: str) -> None:
    trained.log("drafts", message)


def main(argv: list[str] | None = None) -> int:
    """Train (once) and print the folder and its report."""
    return trained.main(
        "drafts",
        lambda target, root: ensure_draft(NAME, target=target, root=root),
        (DraftUnavailable,),
        argv,
    )


if __name__ == "__main__":
    raise SystemExit(main())
