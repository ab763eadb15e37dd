"""``specdeploy load``: a bounded, loopback-only, closed-loop load generator.

Why it exists: the local cluster's emulated vLLM servers (and a vLLM on a
laptop) need traffic whose *kind* is known, so that the add-on's choice of K
can be watched as load and workload change. It is a test tool: it refuses
any URL that is not a loopback address, and every run is bounded in time,
request count, concurrency and tokens.

Map (pure modules first, I/O last):

* ``config``: what a run is asked to do, its defaults and hard caps.
* ``ramp``: stages of (duration, concurrency) and the schedule they give.
* ``loopback``: the URL check (the only name it resolves is ``localhost``).
* ``prompts``: the seeded ``chat``, ``code`` and ``random`` workloads.
* ``request``: one OpenAI-compatible streaming request, built as a value.
* ``stream``: server-sent events in, token timings out (no I/O).
* ``results``: one request's outcome (ok, refused, failed, timed out; the
  kind) and its timings.
* ``stats``, ``timeline`` and ``report``: percentiles, the summary, the run
  per time bucket, the text and the JSON.
* ``client``: the only module that talks HTTP (aiohttp, from the
  ``operator`` extra), and ``runner``: the closed loop of N workers.

It lives under ``specdeploy.cli`` because it is the CLI's client: the wheel
holds ``specdeploy/{cli,operator,runtime}`` only, and the import contracts
(``.importlinter``) already cover this package as part of the CLI.
"""
