"""Launch negmine on SLURM through submitit, with requeue on preemption (``python -m slurm``)."""
