"""The language: pipeline source (.sbp or YAML) -> IR -> checked IR -> executable graph, and back into source.

Imports nothing else of sembp_dsl: every later stage reads what this one builds.
"""
