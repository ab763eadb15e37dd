"""Only for bench/wrong_machine_cpu.py's ISA-capped servers (on their PYTHONPATH only).

With oneDNN capped below AMX (``ONEDNN_MAX_CPU_ISA``), oneDNN never asks the
kernel for the AMX tile state, yet vLLM's CPU attention still picks its AMX
kernel when the CPU has AMX (``cpu_attn._get_attn_isa``), and its first
instruction kills the worker (SIGILL). A CPU without AMX answers False here;
so does this one, so that vLLM takes the kernel such a CPU would run.
"""

import os

if os.environ.get("SPECDEPLOY_BENCH_NO_AMX") == "1":
    import torch.cpu

    torch.cpu._is_amx_tile_supported = lambda: False
