"""Tests of the main-2026-08-22 pin (patchsets/main-2026-08-22) that the shared harness cannot
express: no megatron-core wheel holds a main commit's bytes, so test_wheel_bytes.py checks the part
of the series whose upstream files are byte-identical in the newest wheel."""
