"""The report: figures as pure functions (``figures``), markdown tables (``markdown``) and the
``report.md`` document that ties them together (``document``)."""
