"""What a strategy, a loss and the trainer share of one training step: its records
(:mod:`negmine_core.step`). A leaf package: it imports only torch; every package may import it."""
