"""The `sbpc` command: a thin layer over the API (`main` for the model commands, `runs` for run records)."""

from .commands import main

__all__ = ["main"]
