"""The ``python -m linear_eval`` command line: argument parsing and dispatch (``main``), the
default kNN + SGD command (``default``), the classification subcommands (``classification``) and
the detection subcommands (``detection``)."""
