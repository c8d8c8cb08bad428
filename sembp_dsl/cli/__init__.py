"""The `sbpc` command: a thin layer over the API (`main` for the model commands, `runs` for run records)."""

from ..language.ir import gc_paused

# Importing the commands makes ~150k objects that all live to the end; the collections they set off find nothing
# and took ~10% of the CPU `sbpc run` spends before its first request (bench/startup.py).
with gc_paused():
    from .commands import main

__all__ = ["main"]
