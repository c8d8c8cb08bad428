"""What a call costs, by litellm's packaged price table, read as data.

litellm ships its price table as a JSON file inside the package; reading that file needs no
import of litellm (which takes seconds) and no network. The figures are litellm's own; the
arithmetic is the plain one (tokens times the per-token price), which is what litellm's
`cost_per_token` gives for a chat call without cached or reasoning tokens.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

TABLE = "model_prices_and_context_window_backup.json"


@functools.lru_cache(maxsize=1)
def table() -> dict:
    """litellm's price table ({} when litellm is not installed)."""
    spec = importlib.util.find_spec("litellm")  # finds the package without running it
    if spec is None or not spec.submodule_search_locations:
        return {}
    try:
        return json.loads((Path(spec.submodule_search_locations[0]) / TABLE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def cost(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """Dollars for these tokens on `model` (a litellm model string or a provider-side name); None when unpriced."""
    names = [model] + ([model.split("/", 1)[1]] if "/" in model else [])
    for name in names:
        entry = table().get(name)
        if isinstance(entry, dict) and "input_cost_per_token" in entry:
            return prompt_tokens * float(entry["input_cost_per_token"]) + completion_tokens * float(
                entry.get("output_cost_per_token", 0.0)
            )
    return None
