"""Checked IR -> Graph, the boundary the runtime and the optimizer build on (graph.py), and a file's whole way
there, as `sbpc check` and `compile` take it (compile.py)."""
