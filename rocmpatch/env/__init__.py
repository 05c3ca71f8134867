"""What this machine is (facts) and which environment variables to export for training on it (advice).

facts.py describes a machine as plain data, probed from the real one or built by a test; network.py
reads the NICs from sysfs; advice.py turns facts into recommendations. Nothing here needs torch:
without it, only the network part is reported.
"""
