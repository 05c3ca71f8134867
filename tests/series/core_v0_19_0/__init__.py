"""Tests of the core_v0.19.0 series (patchsets/core_v0.19.0): harness.py builds the trees and runs
Megatron code in child processes; test_compat*.py (COMPAT), test_attention*.py (ATTENTION) and
test_training*.py (CPU) hold the assertions."""
