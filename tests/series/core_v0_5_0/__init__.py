"""core_v0.5.0's own tests: what only its series does (the fused kernels replaced by torch forms, the
legacy megatron/ layout's imports, parity and training). The generic tests
(tests/series/test_<feature>.py) run for it by its release.yaml's features."""
