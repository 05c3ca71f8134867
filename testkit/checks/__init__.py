"""The child side of the series tests: each module runs in a fresh process against one tree
(testkit/child.py), its run(groups) returning plain values for the test to assert on."""
