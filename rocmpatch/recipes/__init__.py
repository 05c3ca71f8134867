"""Training recipes for the newest release: Megatron-LM arguments as YAML data, one file per model,
with parallel layouts for one GPU, one node of 8 and two nodes, and a memory estimate per GPU.

catalog.py loads and checks the files; memory.py estimates memory from the arguments alone.
"""
