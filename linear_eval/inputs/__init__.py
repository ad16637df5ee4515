"""Features in: checkpoint loading, the datasets evaluators read (``eval_datasets``), common
corruptions, the cached feature store (``features``) and a checkpoint's evaluation ``session``.
The only room that touches models and datasets."""
