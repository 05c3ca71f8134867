"""`rocmpatch smoke`: staged checks that a patched Megatron-LM tree works on this machine's devices.

environment -> import -> ops -> collectives -> train, each in a child process (see runner.py);
docs/smoke.md explains each stage and how to read a failure.
"""
