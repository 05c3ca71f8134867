"""rocmpatch: a pinned, verified patch series that makes Megatron-LM run on ROCm."""

__version__ = "0.1.0"
