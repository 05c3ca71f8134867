"""core_v0.5.0's own child checks (tests/series/core_v0_5_0/ runs them): the series' parts 1 and 2."""
