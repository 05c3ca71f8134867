"""The machinery the tests and bench/ share, kept apart from tests/ and out of the wheel.

Imported by tests/ and bench/, and run inside child processes whose first sys.path entry is a
Megatron tree: a Megatron tree has a top-level `tests` package of its own, and it would shadow
ours there, where no tree has a `testkit`. rocmpatch/ never imports it (tests/test_structure.py).
"""
