"""The process: ranks and collectives, threads and cores, precision, the Triton interpreter switch,
progress and metrics logs, the run folder and its lock, checkpoint files; imports only
pretrain.errors and negmine_core."""
