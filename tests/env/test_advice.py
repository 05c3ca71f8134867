from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocmpatch.env.advice import advise
from rocmpatch.env.facts import Gpu, Machine, base_arch
from rocmpatch.env.network import read_network
from tests.env.node import add_interface, add_rdma, mi300x_node, roce_v2, set_default_route


def rocm(root: Path, arch: str, name: str, count: int = 8, environ: dict | None = None) -> Machine:
    gpus = tuple(Gpu(i, name, arch, 192 << 30) for i in range(count))
    return Machine(torch_version="2.7.0+rocm6.3", hip_version="6.3.42131", gpus=gpus, root=root, environ=environ or {})


def by_name(advice) -> dict:
    return {r.name: r for r in advice.recommendations}


def test_mi300x_node_gets_amd_tuning_and_its_real_network(tmp_path):
    advice = advise(rocm(mi300x_node(tmp_path), "gfx942", "AMD Instinct MI300X"))
    recs = by_name(advice)
    assert recs["HSA_NO_SCRATCH_RECLAIM"].value == "1"
    assert recs["GPU_MAX_HW_QUEUES"].value == "2"
    assert recs["TORCH_NCCL_HIGH_PRIORITY"].value == "1" and recs["TORCH_NCCL_HIGH_PRIORITY"].scope == "multi-gpu"
    assert recs["CUDA_DEVICE_MAX_CONNECTIONS"].value == "1"
    # the patched tree does not assert it on ROCm (0009): the reason says so instead of the old assert
    assert "HIP ignores it" in recs["CUDA_DEVICE_MAX_CONNECTIONS"].why and "without rocmpatch's series" in recs["CUDA_DEVICE_MAX_CONNECTIONS"].why
    assert "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL" not in recs  # MI300X: AOTriton's kernels are supported
    assert recs["NCCL_SOCKET_IFNAME"].value == "ens50f0np0" == recs["GLOO_SOCKET_IFNAME"].value
    assert recs["NCCL_IB_HCA"].value == ",".join(f"rdma{i}:1" for i in range(8))
    assert recs["NCCL_IB_GID_INDEX"].value == "3"
    assert all(r.status == "unset" and r.why and r.source for r in advice.recommendations)


def test_status_says_same_or_differs(tmp_path):
    env = {"GPU_MAX_HW_QUEUES": "2", "HSA_NO_SCRATCH_RECLAIM": "0"}
    recs = by_name(advise(rocm(mi300x_node(tmp_path), "gfx950", "AMD Instinct MI355X", environ=env)))
    assert recs["GPU_MAX_HW_QUEUES"].status == "same"
    assert recs["HSA_NO_SCRATCH_RECLAIM"].status == "differs" and recs["HSA_NO_SCRATCH_RECLAIM"].current == "0"
    assert recs["TORCH_NCCL_HIGH_PRIORITY"].status == "unset"


@pytest.mark.parametrize("arch", ["gfx90a", "gfx1100", "gfx1101", "gfx1200", "gfx1201"])
def test_other_amd_archs_get_only_the_generic_rocm_advice(tmp_path, arch):
    advice = advise(rocm(tmp_path, arch, "AMD Radeon", count=1))
    recs = by_name(advice)
    assert "HSA_NO_SCRATCH_RECLAIM" not in recs and "GPU_MAX_HW_QUEUES" not in recs
    assert recs["TORCH_NCCL_HIGH_PRIORITY"].scope == "multi-node"  # one GPU
    if arch.startswith("gfx1"):
        assert any("workstation GPU" in n.message for n in advice.notices)
        # AOTriton's attention kernels are opt-in there: without it SDPA falls to the math path quietly
        assert recs["TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"].value == "1"
        assert arch in recs["TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"].why and "math path" in recs["TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL"].why
    else:
        assert "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL" not in recs


def test_cuda_hopper_and_blackwell(tmp_path):
    hopper = Machine(torch_version="2.7.0+cu126", cuda_version="12.6", gpus=(Gpu(0, "NVIDIA H100 80GB HBM3", "sm_90"),), root=tmp_path)
    recs = by_name(advise(hopper))
    assert recs["CUDA_DEVICE_MAX_CONNECTIONS"].value == "1"
    assert "HSA_NO_SCRATCH_RECLAIM" not in recs
    blackwell = Machine(torch_version="2.7.0+cu128", cuda_version="12.8", gpus=(Gpu(0, "NVIDIA B200", "sm_100"),), root=tmp_path)
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in by_name(advise(blackwell))


def test_no_torch_still_reports_the_network(tmp_path):
    advice = advise(Machine(root=mi300x_node(tmp_path, nics=2)))
    assert any(n.name == "torch" and "not installed" in n.message for n in advice.notices)
    assert set(by_name(advice)) == {"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX"}


def test_gid_index_read_from_sysfs_and_infiniband_needs_none(tmp_path):
    add_interface(tmp_path, "eth0")
    set_default_route(tmp_path, "eth0")
    add_rdma(tmp_path, "mlx5_0", gids=roce_v2(5))
    add_rdma(tmp_path, "mlx5_1", gids=roce_v2(5))
    add_rdma(tmp_path, "mlx5_2", active=False, gids=roce_v2(5))
    recs = by_name(advise(Machine(root=tmp_path)))
    assert recs["NCCL_IB_GID_INDEX"].value == "5"
    assert recs["NCCL_IB_HCA"].value == "mlx5_0:1,mlx5_1:1"  # the port that is down is left out

    ib = tmp_path / "ib"
    add_interface(ib, "ib0", arp_type=32)
    add_rdma(ib, "mlx5_0", link_layer="InfiniBand")
    recs = by_name(advise(Machine(root=ib)))
    assert recs["NCCL_SOCKET_IFNAME"].value == "ib0"  # no default route: the first physical interface up
    assert recs["NCCL_IB_HCA"].value == "mlx5_0:1" and "NCCL_IB_GID_INDEX" not in recs


def test_unreadable_gids_fall_back_to_amds_default(tmp_path):
    add_rdma(tmp_path, "rdma0")
    assert by_name(advise(Machine(root=tmp_path)))["NCCL_IB_GID_INDEX"].value == "3"


def test_socket_interface_skips_virtual_and_down(tmp_path):
    add_interface(tmp_path, "docker0", physical=False)
    add_interface(tmp_path, "eth0", state="down")
    add_interface(tmp_path, "eth1")
    assert read_network(tmp_path).socket_interface.name == "eth1"
    set_default_route(tmp_path, "docker0")  # a default route through a bridge is not an inter-node address
    assert read_network(tmp_path).socket_interface.name == "eth1"


def test_empty_node_says_what_to_set_by_hand(tmp_path):
    advice = advise(Machine(root=tmp_path))
    assert advice.recommendations == ()
    assert any("NCCL_SOCKET_IFNAME" in n.message for n in advice.notices)


def test_folklore_and_conflicting_visibility_are_named(tmp_path):
    env = {"PYTORCH_ROCM_DEVICE": "0,1", "HIP_VISIBLE_DEVICES": "0,1", "CUDA_VISIBLE_DEVICES": "2,3", "ROCR_VISIBLE_DEVICES": "4,5,6,7",
           "HSA_ENABLE_SDMA": "0", "NCCL_IB_DISABLE": "1"}
    notices = {n.name for n in advise(rocm(mi300x_node(tmp_path, nics=1), "gfx942", "AMD Instinct MI300X", environ=env)).notices}
    assert {"PYTORCH_ROCM_DEVICE", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HSA_ENABLE_SDMA", "NCCL_IB_DISABLE"} <= notices


def test_base_arch_and_json_round_trip(tmp_path):
    assert base_arch("gfx942:sramecc+:xnack-") == "gfx942"
    doc = advise(rocm(mi300x_node(tmp_path, nics=1), "gfx942", "AMD Instinct MI300X", count=1)).to_json()
    json.dumps(doc)
    assert doc["gpus"][0]["family"].startswith("Instinct MI300X")
    assert doc["network"]["socket_interface"] == "ens50f0np0"


@pytest.mark.parametrize("arch, says", [
    ("gfx942", "gfx942: FP8 GEMMs in the fnuz formats (torch.float8_e4m3fnuz / float8_e5m2fnuz);"),
    ("gfx950", "gfx950: FP8 GEMMs in the OCP formats (torch.float8_e4m3fn / float8_e5m2);"),
    ("gfx90a", "gfx90a: no FP8 GEMMs (FP8 needs gfx942 with the fnuz formats, gfx950 with the OCP formats, or CUDA sm_89+)"),
])
def test_env_says_what_fp8_needs_on_each_architecture(tmp_path, arch, says):
    fp8 = [n.message for n in advise(rocm(tmp_path, arch, "AMD Instinct", count=1)).notices if n.name == "fp8"]
    assert len(fp8) == 1 and fp8[0].startswith(says), fp8
    assert ("--fp8-recipe tensorwise" in fp8[0]) == (arch != "gfx90a") and ("refused" in fp8[0]) == (arch == "gfx90a")


def test_env_fp8_on_cuda_from_sm_89(tmp_path):
    for arch, has in (("sm_80", False), ("sm_89", True), ("sm_90", True)):
        machine = Machine(torch_version="2.7.0+cu126", cuda_version="12.6", gpus=(Gpu(0, "NVIDIA", arch),), root=tmp_path)
        (fp8,) = [n.message for n in advise(machine).notices if n.name == "fp8"]
        assert fp8.startswith(f"{arch}: FP8 GEMMs in the OCP formats" if has else f"{arch}: no FP8 GEMMs"), fp8
