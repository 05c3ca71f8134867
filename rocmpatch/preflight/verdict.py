"""What counts as slow, from the gathered numbers (pure functions, tested without processes).

A rank is slow when its GEMM TFLOPS is under `min_of_median` x the median of the job's GPUs of the
same kind, or under `min_of_peak` x the GPU's peak. A node is slow inside when its all-reduce bus
bandwidth is under `min_of_median` x the median of the nodes; between nodes, when even its better
pairing with a neighbour node is under that share of the median pair. `min_busbw` (GB/s), when given,
is an absolute floor for both; with two nodes it is the only test across nodes (there is one pair).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Thresholds:
    min_of_median: float = 0.5
    min_of_peak: float = 0.25
    min_busbw: float | None = None  # GB/s

    def __post_init__(self) -> None:
        """A share must be in [0, 1], the floor a number >= 0: a NaN would make every comparison
        false, so no check could ever fail. ValueError naming the flag."""
        for flag, value in (("--min-of-median", self.min_of_median), ("--min-of-peak", self.min_of_peak)):
            if not (isinstance(value, (int, float)) and 0 <= value <= 1):
                raise ValueError(f"{flag} {value}: expected a share between 0 and 1 (0.5: half the median)")
        if self.min_busbw is not None and not (isinstance(self.min_busbw, (int, float)) and 0 <= self.min_busbw < math.inf):
            raise ValueError(f"--min-busbw {self.min_busbw}: expected a bandwidth in GB/s, 0 or more")


@dataclass(frozen=True)
class RankResult:
    rank: int
    node: str
    host: str
    local_rank: int
    device: str
    arch: str
    tflops: float
    peak_tflops: float | None


@dataclass(frozen=True)
class NodeResult:
    node: str
    host: str
    ranks: int
    intra_busbw: float | None  # None with one rank on the node
    inter_busbw: float | None  # its better pair; None with one node


@dataclass(frozen=True)
class Finding:
    what: str  # "gemm", "intra-node", "inter-node"
    who: str  # "rank 3 (node 0, host a, GPU 3)" / "node 1 (host b)"
    value: float
    reference: float
    reason: str


@dataclass
class Verdict:
    ranks: list[RankResult]
    nodes: list[NodeResult]
    pairs: list[tuple[str, str, float]]
    world_busbw: float | None
    thresholds: Thresholds
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict:
        return {"ok": self.ok, "thresholds": asdict(self.thresholds), "world_busbw_gbps": self.world_busbw,
                "ranks": [asdict(r) for r in self.ranks], "nodes": [asdict(n) for n in self.nodes],
                "pairs": [{"nodes": [a, b], "busbw_gbps": bw} for a, b, bw in self.pairs],
                "findings": [asdict(f) for f in self.findings]}


def _slow_against(value: float, median: float, t: Thresholds) -> str | None:
    if t.min_busbw is not None and value < t.min_busbw:
        return f"under the floor of {t.min_busbw:g} GB/s"
    if value < t.min_of_median * median:
        return f"under {t.min_of_median:g} x the median {median:.1f} GB/s"
    return None


def evaluate(ranks: list[RankResult], nodes: list[NodeResult], pairs: list[tuple[str, str, float]],
             world_busbw: float | None, thresholds: Thresholds) -> Verdict:
    verdict = Verdict(ranks, nodes, pairs, world_busbw, thresholds)
    t = thresholds
    for device in sorted({r.device for r in ranks}):
        kind = [r for r in ranks if r.device == device]
        median = statistics.median(r.tflops for r in kind)
        for r in kind:
            who = f"rank {r.rank} (node {r.node}, host {r.host}, GPU {r.local_rank})"
            if r.tflops < t.min_of_median * median:
                verdict.findings.append(Finding("gemm", who, r.tflops, median, f"under {t.min_of_median:g} x the median {median:.1f} TFLOPS of {device}"))
            elif r.peak_tflops and r.tflops < t.min_of_peak * r.peak_tflops:
                verdict.findings.append(Finding("gemm", who, r.tflops, r.peak_tflops, f"under {t.min_of_peak:g} x the peak {r.peak_tflops:g} TFLOPS"))
    for what, attribute in (("intra-node", "intra_busbw"), ("inter-node", "inter_busbw")):
        measured = [(n, getattr(n, attribute)) for n in nodes if getattr(n, attribute) is not None]
        if not measured:
            continue
        reference = [bw for _, _, bw in pairs] if what == "inter-node" else [bw for _, bw in measured]
        median = statistics.median(reference)
        for node, value in measured:
            reason = _slow_against(value, median, t)
            if reason:
                verdict.findings.append(Finding(what, f"node {node.node} (host {node.host})", value, median, reason))
    return verdict


def format_report(v: Verdict) -> str:
    lines = ["rocmpatch preflight", "", "GEMM per rank:",
             f"  {'rank':>4} {'node':>4} {'host':<16} {'gpu':>3} {'device':<28} {'TFLOPS':>9} {'% peak':>7}"]
    for r in v.ranks:
        share = f"{100 * r.tflops / r.peak_tflops:6.1f}%" if r.peak_tflops else "      -"
        lines.append(f"  {r.rank:>4} {r.node:>4} {r.host[:16]:<16} {r.local_rank:>3} {r.device[:28]:<28} {r.tflops:>9.2f} {share:>7}")
    lines += ["", "all-reduce bus bandwidth per node (GB/s, as nccl-tests defines busbw):",
              f"  {'node':>4} {'host':<16} {'ranks':>5} {'inside':>10} {'between':>10}"]
    for n in v.nodes:
        inside = f"{n.intra_busbw:.2f}" if n.intra_busbw is not None else "-"
        between = f"{n.inter_busbw:.2f}" if n.inter_busbw is not None else "-"
        lines.append(f"  {n.node:>4} {n.host[:16]:<16} {n.ranks:>5} {inside:>10} {between:>10}")
    for a, b, bw in v.pairs:
        lines.append(f"  pair nodes {a}+{b}: {bw:.2f} GB/s")
    if v.world_busbw is not None:
        lines.append(f"  all ranks together: {v.world_busbw:.2f} GB/s")
    lines.append("")
    if v.ok:
        lines.append("preflight passed: no rank or node under the thresholds")
    else:
        lines.append(f"preflight FAILED: {len(v.findings)} slow:")
        lines += [f"  {f.what}: {f.who}: {f.value:.2f} ({f.reason})" for f in v.findings]
    return "\n".join(lines)


def bus_bandwidth(nbytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth in GB/s: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n.

    busbw is comparable with the hardware's link speed whatever the number of ranks.
    """
    if ranks < 2 or seconds <= 0:
        return 0.0
    return nbytes / seconds / 1e9 * 2 * (ranks - 1) / ranks
