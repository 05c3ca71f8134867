"""vision-local: CLIP and LLaVA build and train on the CPU without Transformer Engine, with the local
spec (patch vision-norm-without-te). CI: testkit/checks/compat.py's vision group on the patched wheel tree."""

from __future__ import annotations

import pytest

from testkit import harness

pytest.importorskip("torch")
pytestmark = harness.releases_with("vision-local")


@pytest.fixture(scope="session")
def vision(patched_wheel, child_dir) -> dict:
    return harness.run_checks("checks.compat", "vision", patched_wheel, child_dir)["vision"]


@pytest.mark.parametrize("model, shape", [("clip", [2, 17, 64]), ("llava", [2, 48, 128])])
def test_clip_and_llava_build_and_train_on_cpu_without_te(vision, model, shape):
    """CLIP: 16 patches + the class token; LLaVA: 31 text tokens + 17 image embeddings, vocab 128."""
    result = vision[model]
    assert isinstance(result, dict), result  # an error text otherwise (TypeError: ... 'config' without the patch)
    assert result["shape"] == shape and result["device"] == "cpu"
    assert result["norm"] in ("LayerNorm", "RMSNorm")  # WrappedTorchNorm builds torch's own norm
    assert result["with_grad"] == result["params"], result
