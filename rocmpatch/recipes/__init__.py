"""Training recipes: Megatron-LM arguments as YAML data, one file per model, with parallel layouts for
one GPU, one node of 8 and two nodes, a memory estimate per GPU, and the releases each fits.

schema.py reads a recipe file (typed, bounded); catalog.py turns it into recipes, layouts and argument
vectors; memory.py estimates memory from the arguments alone; fit.py says which releases a recipe fits
and what passes to a tree of another (tree_flags.py reads that tree's flags); launch.py makes a recipe
a torchrun launch (rocmpatch.launchers).
"""
