"""Which GPUs the stages use, and the one environment variable that selects them.

On ROCm the HIP runtime honours both HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES (the latter for
CUDA compatibility); when both are set and disagree the runtime warns about "conflicting visibility"
and PyTorch believes HIP_VISIBLE_DEVICES, so device i in torch may not be the GPU you meant. So on ROCm
the children get HIP_VISIBLE_DEVICES only, on CUDA CUDA_VISIBLE_DEVICES only. ROCR_VISIBLE_DEVICES is
applied first, by the ROCm runtime below HIP, so it is left alone and --gpus counts within it.

--gpus indices are the ones torch sees where smoke was started: an existing selection is narrowed,
never replaced (with CUDA_VISIBLE_DEVICES=2,3 already set, --gpus 1 means physical GPU 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

SELECTOR = {"rocm": "HIP_VISIBLE_DEVICES", "cuda": "CUDA_VISIBLE_DEVICES"}
OTHER = {"rocm": "CUDA_VISIBLE_DEVICES", "cuda": "HIP_VISIBLE_DEVICES"}

ROCM_INSTALL = ("install the ROCm build of PyTorch: pip install torch --index-url "
                "https://download.pytorch.org/whl/rocm6.4 (use the rocmX.Y matching your ROCm; "
                "see pytorch.org/get-started)")
CUDA_INSTALL = ("install a CUDA build of PyTorch: pip install torch --index-url "
                "https://download.pytorch.org/whl/cu128 (see pytorch.org/get-started)")


def parse_gpus(text: str | None) -> list[int] | None:
    """'0,1' -> [0, 1]; None (no --gpus) -> None (every visible GPU). Raises ValueError with the fix,
    also for a value that names no GPU ('' or blanks): leaving --gpus out is how to say "all"."""
    if text is None:
        return None
    if not text.strip():
        raise ValueError(f"--gpus {text!r} names no GPU; write indices like 0,1, or leave --gpus out for every visible GPU")
    gpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()):
            raise ValueError(f"--gpus {text!r}: {part!r} is not a GPU index; write indices like 0,1")
        if int(part) in gpus:
            raise ValueError(f"--gpus {text!r}: GPU {part} is listed twice")
        gpus.append(int(part))
    return gpus


def inherited_selection(platform: str, environ: Mapping[str, str]) -> tuple[str | None, list[str] | None]:
    """The variable torch obeys on this platform and its entries, or (None, None) when unset."""
    names = ["HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"] if platform == "rocm" else ["CUDA_VISIBLE_DEVICES"]
    for name in names:
        value = environ.get(name)
        if value is not None:
            return name, [entry.strip() for entry in value.split(",") if entry.strip()]
    return None, None


@dataclass
class Selection:
    """What the children's environment gets: variables to set, variables to remove, and why."""

    set: dict[str, str] = field(default_factory=dict)
    unset: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def apply(self, environ: dict[str, str]) -> dict[str, str]:
        result = {k: v for k, v in environ.items() if k not in self.unset}
        result.update(self.set)
        return result

    def to_json(self) -> dict:
        return {"set": self.set, "unset": self.unset, "notes": self.notes}

    @classmethod
    def from_json(cls, data: Mapping | None) -> "Selection":
        data = data or {}
        return cls(dict(data.get("set", {})), list(data.get("unset", [])), list(data.get("notes", [])))


def select(platform: str, gpus: list[int] | None, visible_count: int,
           environ: Mapping[str, str]) -> Selection:
    """The environment for children that should see exactly `gpus` (None: all visible ones).

    Raises ValueError naming the bad index and what is visible.
    """
    selection = Selection()
    if platform not in SELECTOR:
        selection.unset = ["HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]
        return selection
    var, entries = inherited_selection(platform, environ)
    chosen_var, other = SELECTOR[platform], OTHER[platform]
    shown = f" ({var}={','.join(entries)})" if var else ""
    for index in gpus or []:
        if index >= visible_count:
            raise ValueError(
                f"GPU {index} does not exist: torch sees {visible_count} GPU(s)"
                f"{' numbered 0-' + str(visible_count - 1) if visible_count else ''}{shown}; "
                "pick indices from that range with --gpus")
    if gpus is None:
        picked = entries
    else:
        picked = [entries[i] if entries and i < len(entries) else str(i) for i in gpus]
    if picked is not None:
        selection.set[chosen_var] = ",".join(picked)
    if environ.get(other) is not None:
        selection.unset.append(other)
        if platform == "rocm":
            selection.notes.append(
                f"removed {other}={environ[other]}: on ROCm the HIP runtime applies it as well as "
                f"{chosen_var}, and two filters that disagree select the wrong GPUs")
    if platform == "rocm" and environ.get("ROCR_VISIBLE_DEVICES") is not None:
        selection.notes.append(
            f"ROCR_VISIBLE_DEVICES={environ['ROCR_VISIBLE_DEVICES']} is applied first; "
            "GPU indices count within it")
    return selection
