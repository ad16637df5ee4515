"""An example negmine plugin (examples/plugin): ``batch_mix`` (strategy) and ``align_uniform``
(loss), registered by name through the entry points of its pyproject.toml."""
