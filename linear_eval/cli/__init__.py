"""The ``python -m linear_eval`` command line: argument parsing and dispatch (``main``), what each
subcommand runs (``commands``), the default kNN + SGD command's flags and output (``default``), the
kappa analyses (``kappa``), the cross-run table (``table``) and the summary line."""
