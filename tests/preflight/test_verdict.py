from __future__ import annotations

from rocmpatch.preflight.peaks import peak_for
from rocmpatch.preflight.verdict import NodeResult, RankResult, Thresholds, bus_bandwidth, evaluate, format_report


def rank(r, node, tflops, peak=1307.4, device="AMD Instinct MI300X"):
    return RankResult(r, node, f"host{node}", r % 8, device, "gfx942", tflops, peak)


def test_peaks_by_arch_and_name():
    assert peak_for("gfx942", "AMD Instinct MI300X").bf16_tflops == 1307.4
    assert peak_for("gfx942", "AMD Instinct MI325X").bf16_tflops == 1307.4
    assert peak_for("gfx950", "AMD Instinct MI355X").bf16_tflops == 2516.6
    assert peak_for("gfx90a", "AMD Instinct MI250X / MI250").bf16_tflops == 383.0
    assert peak_for("sm_90", "NVIDIA H100 80GB HBM3").bf16_tflops == 989.4
    assert peak_for("sm_90", "NVIDIA H100 PCIe").bf16_tflops == 756.5
    assert peak_for("gfx1201", "AMD Radeon RX 9070 XT") is None
    assert peak_for("cpu", "cpu") is None


def test_bus_bandwidth_is_nccl_tests_definition():
    # 1 GB in 0.01 s on 8 ranks: algbw 100 GB/s, busbw 100 * 2 * 7 / 8 = 175 GB/s
    assert abs(bus_bandwidth(10**9, 0.01, 8) - 175.0) < 1e-9
    assert bus_bandwidth(10**9, 0.01, 1) == 0.0


def test_a_slow_gpu_is_named_against_the_median_and_the_peak():
    ranks = [rank(i, "0", 700.0) for i in range(7)] + [rank(7, "0", 300.0)]
    v = evaluate(ranks, [], [], None, Thresholds())
    assert [f.who for f in v.findings] == ["rank 7 (node 0, host host0, GPU 7)"]
    assert "median 700.0" in v.findings[0].reason and not v.ok

    ranks = [rank(i, "0", 250.0) for i in range(8)]  # all equally slow: only the peak catches it
    v = evaluate(ranks, [], [], None, Thresholds())
    assert len(v.findings) == 8 and "peak 1307.4" in v.findings[0].reason
    assert evaluate(ranks, [], [], None, Thresholds(min_of_peak=0.1)).ok


def test_slow_nodes_inside_and_between():
    nodes = [NodeResult("0", "a", 8, 300.0, 40.0), NodeResult("1", "b", 8, 310.0, 40.0),
             NodeResult("2", "c", 8, 100.0, 10.0), NodeResult("3", "d", 8, 305.0, 40.0)]
    pairs = [("0", "1", 40.0), ("1", "2", 10.0), ("2", "3", 11.0), ("3", "0", 40.0)]
    v = evaluate([], nodes, pairs, 30.0, Thresholds())
    assert [(f.what, f.who) for f in v.findings] == [("intra-node", "node 2 (host c)"), ("inter-node", "node 2 (host c)")]
    text = format_report(v)
    assert "preflight FAILED: 2 slow" in text and "pair nodes 1+2: 10.00 GB/s" in text


def test_two_nodes_are_judged_by_the_absolute_floor_only():
    nodes = [NodeResult("0", "a", 8, 300.0, 5.0), NodeResult("1", "b", 8, 300.0, 5.0)]
    assert evaluate([], nodes, [("0", "1", 5.0)], 5.0, Thresholds()).ok
    v = evaluate([], nodes, [("0", "1", 5.0)], 5.0, Thresholds(min_busbw=20.0))
    assert {f.what for f in v.findings} == {"inter-node"} and len(v.findings) == 2
