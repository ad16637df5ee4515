"""The networks: backbones, heads, MoCo's encoder pair, split BN and its Triton kernels; imports
only pretrain.runtime below it."""
