"""What a file's blocks and declarations name outside it, each with its own checks: the optimize settings
(method.py), the data (data.py), model providers (providers.py) and Python code (callables.py)."""
