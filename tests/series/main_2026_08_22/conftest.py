"""The release of this folder's tests (tests/series/conftest.py's `release` fixture)."""

import pytest

from tests.series import harness


@pytest.fixture(scope="session")
def release() -> harness.Release:
    return harness.release_of(__file__)
