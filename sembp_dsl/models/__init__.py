"""The models: the one door to LLMs (`llm.LLM`: cache, retries, limits, budgets, ledger) and the wire under it."""
