"""negmine pretraining: MoCo v2 with a momentum encoder, a labelled queue and pluggable negatives."""
