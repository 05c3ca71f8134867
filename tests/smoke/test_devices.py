"""GPU selection: one variable per platform, narrowing what the user already selected."""

from __future__ import annotations

import pytest

from rocmpatch.smoke import devices
from rocmpatch.smoke.environment import choose_platform
from rocmpatch.smoke.child import StageFailure


def test_parse_gpus():
    assert devices.parse_gpus(None) is None
    assert devices.parse_gpus(" 0, 2 ") == [0, 2]
    with pytest.raises(ValueError, match="not a GPU index"):
        devices.parse_gpus("0,x")
    with pytest.raises(ValueError, match="twice"):
        devices.parse_gpus("1,1")


def test_rocm_sets_hip_only_and_removes_cuda_variable():
    selection = devices.select("rocm", [1], 4, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"})
    # torch on ROCm saw CUDA_VISIBLE_DEVICES (no HIP variable): index 1 is entry "1"
    assert selection.set == {"HIP_VISIBLE_DEVICES": "1"}
    assert selection.unset == ["CUDA_VISIBLE_DEVICES"]
    env = selection.apply({"CUDA_VISIBLE_DEVICES": "0,1,2,3", "PATH": "/bin"})
    assert env == {"HIP_VISIBLE_DEVICES": "1", "PATH": "/bin"}


def test_existing_selection_is_narrowed_not_replaced():
    selection = devices.select("cuda", [1], 2, {"CUDA_VISIBLE_DEVICES": "2,3"})
    assert selection.set == {"CUDA_VISIBLE_DEVICES": "3"}
    rocm = devices.select("rocm", [0, 1], 2, {"HIP_VISIBLE_DEVICES": "4,6", "CUDA_VISIBLE_DEVICES": "4,6"})
    assert rocm.set == {"HIP_VISIBLE_DEVICES": "4,6"} and rocm.unset == ["CUDA_VISIBLE_DEVICES"]


def test_rocr_visible_devices_is_kept_and_explained():
    selection = devices.select("rocm", [0], 2, {"ROCR_VISIBLE_DEVICES": "2,3"})
    assert selection.set == {"HIP_VISIBLE_DEVICES": "0"}
    assert "ROCR_VISIBLE_DEVICES" not in selection.unset
    assert any("applied first" in note for note in selection.notes)


def test_nonexistent_gpu_index_names_what_is_visible():
    with pytest.raises(ValueError, match=r"GPU 2 does not exist: torch sees 2 GPU\(s\) numbered 0-1"):
        devices.select("cuda", [0, 2], 2, {})


def test_cuda_build_when_rocm_was_asked_says_how_to_install():
    with pytest.raises(StageFailure, match="is a CUDA build.*download.pytorch.org/whl/rocm"):
        choose_platform("rocm", "cuda", 1, "2.6.0+cu124")


def test_no_gpu():
    with pytest.raises(StageFailure, match="no GPU visible.*rocm-smi"):
        choose_platform("rocm", "rocm", 0, "2.6.0+rocm6.2")
    platform, notes = choose_platform("auto", "cuda", 0, "2.6.0+cu124")
    assert platform == "cpu" and "running on CPU" in notes[0]
    assert choose_platform("auto", "cpu", 0, "2.13.0+cpu")[0] == "cpu"
