"""sbpc: a compiler and optimizer for LLM agent pipelines (semantic backpropagation)."""

__version__ = "0.1.0"
