"""GPU specifications and the efficiency factors the cost model applies to them.

Peak figures are datasheet leads (dense, no sparsity) as listed in
``shared/REFERENCE.md``; FP8 peaks are the same datasheets' dense FP8 lines.
The interconnect figures are the per-GPU, per-direction link bandwidth of the
part's usual scale-up fabric (NVLink generation, Infinity Fabric, or PCIe for
L40S), used only for tensor-parallel all-reduce and logit gathers.

Datasheets are ceilings, not what a serving step gets. Measured on one H200:
~4.3 of 4.8 TB/s on a device copy and 770-800 of 989 TFLOP/s on a large bf16
matmul, so the defaults are 0.9 of bandwidth and 0.8 of compute. Everything
the simulator derives from these figures is *modelled*.
"""

from __future__ import annotations

from dataclasses import dataclass

TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True)
class GPU:
    """One accelerator SKU, with the efficiencies a well-tuned kernel reaches."""

    name: str
    product: str
    """The value GPU feature discovery writes into ``nvidia.com/gpu.product``
    (AMD's labeller spells its product name differently; we use one spelling)."""
    bf16_tflops: float
    fp8_tflops: float | None
    hbm_tbps: float
    memory_gb: float
    link_gbps: float
    """Per-GPU, per-direction scale-up bandwidth in GB/s (all-reduce, gathers)."""
    link_latency_us: float
    """Latency of one small all-reduce (custom one-shot kernels over NVLink)."""
    bandwidth_efficiency: float = 0.9
    compute_efficiency: float = 0.8
    link_efficiency: float = 0.7

    def peak_flops(self, dtype: str) -> float:
        """Datasheet FLOP/s for ``dtype``; FP8 falls back to bf16 where unsupported."""
        if dtype == "fp8" and self.fp8_tflops is not None:
            return self.fp8_tflops * TERA
        return self.bf16_tflops * TERA

    def flops(self, dtype: str) -> float:
        """FLOP/s a large, well-shaped GEMM sustains (peak x compute efficiency)."""
        return self.peak_flops(dtype) * self.compute_efficiency

    @property
    def bandwidth(self) -> float:
        """HBM bytes/s a streaming kernel sustains (datasheet x efficiency)."""
        return self.hbm_tbps * TERA * self.bandwidth_efficiency

    @property
    def link_bandwidth(self) -> float:
        """Scale-up bytes/s one GPU sustains per direction in a collective."""
        return self.link_gbps * GIGA * self.link_efficiency

    @property
    def memory_bytes(self) -> float:
        """HBM capacity in bytes."""
        return self.memory_gb * GIGA


GPUS: dict[str, GPU] = {
    gpu.name: gpu
    for gpu in (
        GPU("H100-SXM", "NVIDIA-H100-80GB-HBM3", 989, 1979, 3.35, 80, 450, 8.0),
        GPU("H200", "NVIDIA-H200", 989, 1979, 4.8, 141, 450, 8.0),
        GPU("A100-80GB", "NVIDIA-A100-SXM4-80GB", 312, None, 2.0, 80, 300, 10.0),
        # L40S has no NVLink: tensor parallel goes over PCIe Gen4 x16.
        GPU("L40S", "NVIDIA-L40S", 362, 733, 0.864, 48, 32, 25.0),
        GPU("B200", "NVIDIA-B200", 2250, 4500, 8.0, 180, 900, 6.0),
        GPU("MI300X", "AMD-Instinct-MI300X", 1307, 2615, 5.3, 192, 448, 12.0),
    )
}


def get_gpu(name: str) -> GPU:
    """A GPU by its short name (``H100-SXM``) or its GFD product label."""
    if name in GPUS:
        return GPUS[name]
    for gpu in GPUS.values():
        if gpu.product == name:
            return gpu
    raise KeyError(f"unknown GPU {name!r}; known: {', '.join(sorted(GPUS))}")
