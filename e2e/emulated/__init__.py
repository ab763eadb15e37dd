"""An EMULATED vLLM server for the local cluster: vLLM's API and metrics, no GPU, no model.

Serving pods on KWOK's fake GPU nodes run ``python -m e2e.emulated.vllm_serve``
with the container's own ``vllm serve`` arguments. What is real: the HTTP
API's shapes (vLLM 0.32's OpenAI-compatible routes), vLLM's metric names and
labels, continuous batching in wall-clock time, and the specdeploy add-on
itself (controller, policy, table watcher, its metrics). What is modelled:
every step's duration (the simulator's cost model for the preset on the
node's GPU), proposal lengths and acceptance (the simulator's models per
traffic class), output lengths, and the text (fake words). README.md has
the contract.

Modules, lowest first: ``catalog`` (which preset), ``workloads`` (traffic
classes), ``text``, ``args``, ``config``; ``drafting`` (per-step draws),
``vllm_metrics``, ``ksource`` (who picks K: the add-on or vLLM); ``engine``
(the step loop); ``protocol`` (wire format, pure), ``api`` (routes);
``server`` (life cycle), ``vllm_serve`` (entry point).
"""
