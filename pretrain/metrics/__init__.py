"""Evaluation maths that the training monitor and linear_eval share (the weighted cosine kNN,
s_con); takes tensors, imports nothing of the project."""
