"""Which environment variables to export for Megatron-LM training on a machine, and why.

Each rule names where its value comes from; docs/environment.md has the same table with the sources.
Values are documented facts (AMD's Primus launcher defaults, the ROCm and NCCL docs, upstream
Megatron-LM's own checks), never guesses; the network values are read from the node itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from rocmpatch.env.facts import Machine
from rocmpatch.env.network import Network, read_network

# Instinct GPUs AMD's Primus launcher tunes for (MI300X, MI325X: gfx942; MI350X, MI355X: gfx950).
MI300_CLASS = ("gfx942", "gfx950")
RADEON_PREFIXES = ("gfx110", "gfx120")
AOTRITON_EXPERIMENTAL = "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"
ARCH_NAMES = {
    "gfx942": "Instinct MI300X / MI325X (CDNA 3)",
    "gfx950": "Instinct MI350X / MI355X (CDNA 4)",
    "gfx90a": "Instinct MI210 / MI250 / MI250X (CDNA 2)",
    "gfx1100": "Radeon RX 7900 / PRO W7900 (RDNA 3)",
    "gfx1101": "Radeon RX 7800 / 7700, PRO W7800 / W7700 (RDNA 3)",
    "gfx1200": "Radeon RX 9060 (RDNA 4)",
    "gfx1201": "Radeon RX 9070 / AI PRO R9700 (RDNA 4)",
}

# What --fp8-format needs per architecture without Transformer Engine (patch fp8-tensorwise-local:
# torch._scaled_mm on hipBLASLt or cuBLASLt); megatron/core/extensions/torch_fp8.py has the same table.
FP8_FORMATS = {
    "gfx942": "the fnuz formats (torch.float8_e4m3fnuz / float8_e5m2fnuz)",
    "gfx950": "the OCP formats (torch.float8_e4m3fn / float8_e5m2)",
}
FP8_CUDA_FROM = 89  # sm_89 (Ada) and newer have FP8 GEMMs, in the OCP formats

PRIMUS = "AMD Primus, runner/helpers/envs/base_env.sh"
FOLKLORE = {
    "PYTORCH_ROCM_DEVICE": "read by nothing (not by PyTorch, not by ROCm): unset it",
    "GPU_MAX_HEAP_SIZE": "OpenCL-era ROCclr flag; does not change what PyTorch can allocate",
    "GPU_MAX_ALLOC_PERCENT": "OpenCL-era ROCclr flag; does not change what PyTorch can allocate",
}


@dataclass(frozen=True)
class Recommendation:
    name: str
    value: str
    why: str
    source: str
    scope: str  # "always", "multi-gpu" or "multi-node"
    current: str | None  # the value in the environment now, None when unset

    @property
    def status(self) -> str:
        if self.current is None:
            return "unset"
        return "same" if self.current == self.value else "differs"

    def to_json(self) -> dict:
        return {"name": self.name, "value": self.value, "status": self.status, "current": self.current,
                "scope": self.scope, "why": self.why, "source": self.source}


@dataclass(frozen=True)
class Notice:
    name: str  # a variable, or "torch" / "network"
    message: str

    def to_json(self) -> dict:
        return {"name": self.name, "message": self.message}


@dataclass(frozen=True)
class Advice:
    machine: Machine
    network: Network
    recommendations: tuple[Recommendation, ...]
    notices: tuple[Notice, ...]

    def to_json(self) -> dict:
        m = self.machine
        socket = self.network.socket_interface
        return {
            "torch": {"version": m.torch_version, "hip": m.hip_version, "cuda": m.cuda_version, "platform": m.platform},
            "gpus": [{"index": g.index, "name": g.name, "arch": g.arch, "family": ARCH_NAMES.get(g.arch),
                      "memory_bytes": g.memory_bytes} for g in m.gpus],
            "network": {
                "socket_interface": socket.name if socket else None,
                "interfaces": [{"name": i.name, "kind": i.kind, "up": i.up, "physical": i.physical, "speed_mbps": i.speed_mbps,
                                "default_route": i.default_route, "rdma_device": i.rdma_device} for i in self.network.interfaces],
                "rdma_ports": [{"name": p.name, "active": p.active, "link_layer": p.link_layer, "rate": p.rate,
                                "roce_v2_ipv4_gid_indices": list(p.roce_v2_ipv4_gids)} for p in self.network.rdma_ports],
            },
            "recommendations": [r.to_json() for r in self.recommendations],
            "notices": [n.to_json() for n in self.notices],
        }


class _Builder:
    def __init__(self, environ: dict[str, str]) -> None:
        self.environ = environ
        self.recommendations: list[Recommendation] = []
        self.notices: list[Notice] = []

    def recommend(self, name: str, value: str, why: str, source: str, scope: str = "always") -> None:
        self.recommendations.append(Recommendation(name, value, why, source, scope, self.environ.get(name)))

    def notice(self, name: str, message: str) -> None:
        self.notices.append(Notice(name, message))


def _gpu_part(machine: Machine, b: _Builder) -> None:
    platform = machine.platform
    if platform == "none":
        b.notice("torch", "torch is not installed: GPU recommendations skipped (install the ROCm or CUDA build of PyTorch)")
        return
    if platform == "cpu":
        b.notice("torch", f"torch {machine.torch_version} is a CPU-only build: GPU recommendations skipped")
        return
    if not machine.gpus:
        b.notice("torch", f"torch {machine.torch_version} ({platform}) sees no GPU: check the driver and *_VISIBLE_DEVICES")
        return
    archs = machine.archs
    if len(archs) > 1:
        b.notice("gpus", f"GPUs of several architectures ({', '.join(archs)}): one job should use one kind")
    many = len(machine.gpus) > 1
    if platform == "rocm":
        if any(a in MI300_CLASS for a in archs):
            b.recommend("HSA_NO_SCRATCH_RECLAIM", "1",
                        "the ROCm runtime keeps kernels' scratch memory instead of reclaiming it; AMD sets it against crashes in MoE training",
                        f"{PRIMUS}; ROCR runtime environment variables")
            b.recommend("GPU_MAX_HW_QUEUES", "2",
                        "HIP uses 2 hardware queues per GPU: AMD's setting for steady overlap of compute and RCCL streams",
                        PRIMUS)
        b.recommend("TORCH_NCCL_HIGH_PRIORITY", "1",
                    "PyTorch gives its RCCL streams high priority, so collectives overlapping GEMMs are not starved",
                    f"{PRIMUS}; PyTorch ProcessGroupNCCL", "multi-gpu" if many else "multi-node")
        b.recommend("CUDA_DEVICE_MAX_CONNECTIONS", "1",
                    "HIP ignores it; only for a Megatron-LM tree without rocmpatch's series, whose validate_args asserts it "
                    "is 1 with tensor or context parallelism because ROCm GPUs report an arch major of 9 "
                    "(the series' cuda-device-max-connections patch limits that rule to CUDA builds)",
                    f"upstream megatron/training/arguments.py; rocmpatch's cuda-device-max-connections patch; {PRIMUS}")
        radeon = [a for a in archs if a.startswith(RADEON_PREFIXES)]
        if radeon:
            b.recommend(AOTRITON_EXPERIMENTAL, "1",
                        f"PyTorch marks AOTriton's flash and memory-efficient attention kernels experimental on "
                        f"{', '.join(radeon)} (RDNA 3/4) and skips them unless this is 1: scaled_dot_product_attention "
                        "then falls back to its math path without an error, materializing the [b, heads, s, s] scores "
                        "(several GiB per layer at sequence 2048) and running several times slower",
                        "PyTorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp (check_flash_attention_hardware_support)")
        for arch in archs:
            if arch.startswith(RADEON_PREFIXES):
                b.notice("gpus", f"{arch} ({ARCH_NAMES.get(arch, 'Radeon')}): a workstation GPU; use the small recipe, one node, no RDMA")
            elif arch not in ARCH_NAMES:
                b.notice("gpus", f"{arch}: not an architecture rocmpatch knows; only the generic recommendations apply")
        _visible_devices(b)
        if b.environ.get("HSA_ENABLE_SDMA") == "0":
            b.notice("HSA_ENABLE_SDMA", "is 0: copies use blit kernels instead of the DMA engines; a workaround for hangs, not a speed-up (docs/environment.md)")
    else:
        b.recommend("TORCH_NCCL_HIGH_PRIORITY", "1",
                    "PyTorch gives its NCCL streams high priority, so collectives overlapping GEMMs are not starved",
                    "PyTorch ProcessGroupNCCL", "multi-gpu" if many else "multi-node")
        pre_blackwell = [a for a in archs if a.startswith("sm_") and a[3:].isdigit() and int(a[3:]) < 100]
        if pre_blackwell:
            b.recommend("CUDA_DEVICE_MAX_CONNECTIONS", "1",
                        "one CUDA work queue keeps a tensor-parallel collective launched before the GEMM it overlaps; Megatron-LM asserts it before Blackwell (sm_100)",
                        "upstream megatron/training/arguments.py")
    _fp8_part(archs, b)
    for name, why in FOLKLORE.items():
        if name in b.environ:
            b.notice(name, f"is set: {why}")


def _fp8_part(archs: tuple[str, ...], b: _Builder) -> None:
    """What --fp8-format e4m3|hybrid --fp8-recipe tensorwise needs on each architecture here."""
    for arch in archs:
        formats = FP8_FORMATS.get(arch)
        if arch.startswith("sm_") and arch[3:].isdigit() and int(arch[3:]) >= FP8_CUDA_FROM:
            formats = FP8_FORMATS["gfx950"]  # the OCP formats
        if formats:
            b.notice("fp8", f"{arch}: FP8 GEMMs in {formats}; without Transformer Engine --fp8-format e4m3|hybrid "
                            "runs with --fp8-recipe tensorwise (torch._scaled_mm); `rocmpatch smoke` checks one")
        else:
            b.notice("fp8", f"{arch}: no FP8 GEMMs (FP8 needs gfx942 with the fnuz formats, gfx950 with the OCP "
                            "formats, or CUDA sm_89+): --fp8-format is refused; train in BF16")


def _visible_devices(b: _Builder) -> None:
    env = b.environ
    hip, cuda, rocr = env.get("HIP_VISIBLE_DEVICES"), env.get("CUDA_VISIBLE_DEVICES"), env.get("ROCR_VISIBLE_DEVICES")
    if hip is not None and cuda is not None and hip != cuda:
        b.notice("HIP_VISIBLE_DEVICES", f"HIP_VISIBLE_DEVICES={hip} and CUDA_VISIBLE_DEVICES={cuda} differ: PyTorch takes HIP_VISIBLE_DEVICES; set only one")
    if rocr is not None and (hip is not None or cuda is not None):
        b.notice("ROCR_VISIBLE_DEVICES", "set together with HIP/CUDA_VISIBLE_DEVICES: the second filter indexes the GPUs the first left (renumbered from 0); set only one")


def _network_part(network: Network, b: _Builder) -> None:
    socket = network.socket_interface
    if socket is None:
        b.notice("network", "no usable interface under /sys/class/net: set NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME yourself for multi-node runs")
    else:
        how = "carries the default route" if socket.default_route else "is the first physical interface that is up"
        why = f"{socket.name} {how}: the address other nodes reach this one by"
        b.recommend("NCCL_SOCKET_IFNAME", socket.name, f"{why} (RCCL/NCCL bootstrap and socket transport)", "AMD ROCm Megatron-LM training guide; NCCL docs", "multi-node")
        b.recommend("GLOO_SOCKET_IFNAME", socket.name, f"{why} (gloo groups: Megatron's distributed-optimizer checkpointing)", "AMD ROCm Megatron-LM training guide; PyTorch docs", "multi-node")
    active = network.active_rdma_ports
    if active:
        layers = sorted({p.link_layer for p in active})
        b.recommend("NCCL_IB_HCA", ",".join(p.name for p in active),
                    f"the {len(active)} active RDMA port(s) of this node ({', '.join(layers)}), so RCCL/NCCL uses every one",
                    "AMD ROCm Megatron-LM training guide; AMD Primus get_nccl_ib_hca.sh", "multi-node")
        roce = [p for p in active if p.link_layer.lower() == "ethernet"]
        if roce:
            common = set(roce[0].roce_v2_ipv4_gids).intersection(*(set(p.roce_v2_ipv4_gids) for p in roce[1:]))
            if common:
                index = min(common)
                why = f"GID {index} is RoCE v2 with an IPv4 address on every RoCE port here"
            else:
                index = 3
                why = "RoCE ports whose RoCE v2 IPv4 GID could not be read: AMD's default index 3 (check `show_gids`)"
            b.recommend("NCCL_IB_GID_INDEX", str(index), why, f"{PRIMUS}; sysfs gid_attrs", "multi-node")
        if b.environ.get("NCCL_IB_DISABLE") == "1":
            b.notice("NCCL_IB_DISABLE", "is 1 although this node has active RDMA ports: RCCL/NCCL falls back to TCP sockets, far slower")
    elif network.rdma_ports:
        b.notice("network", f"RDMA ports found but none ACTIVE ({', '.join(p.name for p in network.rdma_ports)}): check cables and the subnet manager")
    else:
        b.notice("network", "no RDMA ports under /sys/class/infiniband: between nodes RCCL/NCCL will use TCP sockets (slow for training)")


def advise(machine: Machine) -> Advice:
    network = read_network(machine.root)
    builder = _Builder(machine.environ)
    _gpu_part(machine, builder)
    _network_part(network, builder)
    return Advice(machine, network, tuple(builder.recommendations), tuple(builder.notices))
