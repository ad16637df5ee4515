"""Statistics and records: bootstrap intervals and tests (``stats``) and the summaries that every
evaluator's JSON record is built from (``summary``)."""
