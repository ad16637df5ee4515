"""Inputs: datasets, image files, the two-stage views and augmentation, device decode, the device-
resident training split; imports only pretrain.runtime below it."""
