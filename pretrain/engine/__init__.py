"""Training only: the step, the epoch loop, setup, schedules, the run and its checkpoint and resume,
CUDA graphs, the online probe and the kNN monitor; may import every room below it."""
