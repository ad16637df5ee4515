"""negmine pretraining: MoCo v2, a momentum encoder, a labelled queue, pluggable negatives."""
