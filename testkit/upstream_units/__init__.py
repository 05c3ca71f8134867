"""Upstream's own tests/unit_tests on CPU in a patched tree: the runner and the pytest plugin it loads there."""
