"""The process: ranks and collectives, threads and cores, precision, the Triton interpreter switch,
progress and metrics logs; imports only pretrain.errors and negmine_core."""
