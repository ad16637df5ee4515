"""Training: config to objects (build), the step and epoch loop, queue, checkpoints, the run-folder
lock, CUDA graphs, online probe, kNN monitor, export; may import every room below it."""
