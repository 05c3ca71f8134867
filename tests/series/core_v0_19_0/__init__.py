"""core_v0.19.0's own tests: what only this release has (its smoke profile's deepseek run). Every
generic test (tests/series/test_<feature>.py) runs for it by its release.yaml's features."""
