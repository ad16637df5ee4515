"""The networks: backbones, heads, MoCo's encoder pair and the queue beside it, split BN and its
Triton kernels; imports only pretrain.runtime and negmine_core below it."""
