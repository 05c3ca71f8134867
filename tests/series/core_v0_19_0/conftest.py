"""This folder's tests are core_v0.19.0's own: they take the fixture `release` as its release, so
the shared fixtures of tests/series/conftest.py (training_tree, ...) build its trees."""

from testkit.harness import own_release


def pytest_generate_tests(metafunc):
    own_release(metafunc, __file__)
