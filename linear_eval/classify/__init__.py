"""Classification on frozen features: weighted and majority kNN (``knn``), linear probes (``probe``
for the SGD protocols, ``logreg`` for L-BFGS, ``linear`` over seeds), few labels (``limited``) and
transfer to other datasets (``transfer``); the embedding's geometry (``geometry``: t-SNE map and
cluster indices, nearest-neighbour margins)."""
