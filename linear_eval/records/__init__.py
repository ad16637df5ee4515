"""Statistics and records: bootstrap intervals and tests (``stats``), the summaries that every
evaluator's JSON record is built from (``summary``), and the run folders that ``table`` compares
(``runs``, ``training``)."""
