"""The EAGLE head's drafting math in torch: run inside vLLM's CPU venv, where torch is.

Not collected by the project's pytest (no ``test_`` prefix): torch exists only
in that venv, so ``tests/model/test_torch_in_the_vllm_venv.py`` runs this file
with the venv's own pytest and checks that every case ran and passed.
"""

from __future__ import annotations

from pathlib import Path

import torch

from e2e.models import eagle


def _small_shape() -> eagle.Shape:
    return eagle.Shape(hidden=32, heads=4, kv_heads=2, head_dim=8, theta=10000.0, eps=1e-5)


def test_a_draft_step_over_the_cache_equals_the_teacher_forced_forward() -> None:
    """Drafting from prefix t with the true token and hidden reproduces index t+1."""
    torch.manual_seed(0)
    shape = _small_shape()
    params = eagle.init_head(shape, intermediate=48, seed=1)
    for p in params.values():
        p.data += torch.randn_like(p) * 0.05
    n = 10
    embeds, hidden = torch.randn(n, 32), torch.randn(n, 32)
    with torch.no_grad():
        out, keys, values = eagle.head_step(params, shape, embeds, hidden, torch.arange(n))
        starts = torch.arange(0, n - 1)
        visible = torch.arange(n)[None, :] <= starts[:, None]
        step, _, _ = eagle.head_step(
            params, shape, embeds[1:], hidden[1:], starts + 1, [(keys, values, visible)]
        )
    assert torch.allclose(step, out[1:], atol=1e-5)


def test_evaluate_accepts_everything_when_the_head_is_the_target(tmp_path: Path) -> None:
    """A head whose outputs' argmax is always the next greedy token accepts at every position."""
    shape = _small_shape()
    params = eagle.init_head(shape, intermediate=48, seed=1)
    with torch.no_grad():
        for name in ("o", "down"):
            params[name].zero_()  # the layer adds nothing: output = fc(...)
        params["fc"].zero_()
        params["fc"][:, :32] = torch.eye(32)  # output = embedding of the input token
    vocab = 40
    embed = torch.eye(vocab, 32) * 10
    # Tokens t+1 -> t+2 is "repeat the token": a text of one token accepts all drafts.
    ids = [5] * 12
    feats = torch.randn(len(ids), 32)
    labels = torch.tensor([5] * 12)  # the target's argmax after each prefix: the next token
    rates, samples = eagle.evaluate(params, shape, embed, [(ids, 4, feats, labels)], 3)
    assert samples == len(ids) - 2 - 3
    assert rates == [1.0, 1.0, 1.0]
    other = [5, 6] * 6
    labels = torch.tensor([*other[1:], 5])
    rates, _ = eagle.evaluate(params, shape, embed, [(other, 4, feats, labels)], 3)
    assert rates[0] == 0.0
