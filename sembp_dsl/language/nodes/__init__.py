"""What every node is made of, whichever its kind: its compiled form (node.py), when it runs (branches.py) and how
often (maps.py), its prompt (templates.py, demos.py), its reply's shape (shapes.py), the metric that scores it
(metrics.py) and what a run of it leaves (trace.py). The kinds (language/kinds/) build on these."""
