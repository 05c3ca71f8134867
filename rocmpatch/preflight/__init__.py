"""A preflight for training jobs on one or many nodes: GEMM throughput per GPU, all-reduce bus bandwidth
inside each node and between nodes, and a table of whatever is slow.

Run it the way the job will be started, one process per GPU:

    torchrun --nproc-per-node 8 -m rocmpatch.preflight
    srun --ntasks-per-node 1 torchrun --nnodes $SLURM_NNODES --nproc-per-node 8 \\
         --rdzv-backend c10d --rdzv-endpoint $MASTER_ADDR:29500 -m rocmpatch.preflight

peaks.py: the bf16 dense peak of each GPU; measure.py: the timings; verdict.py: what counts as slow
(pure functions); worker.py: one rank's run.
"""
