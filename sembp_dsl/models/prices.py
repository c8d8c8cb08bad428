"""What a call costs, and what a model can take, by litellm's packaged model table, read as data.

litellm ships its price table as a JSON file inside the package; reading that file needs no
import of litellm (which takes seconds) and no network. The figures are litellm's own; the
arithmetic is the plain one (tokens times the per-token price, prompt tokens the provider's cache served at
its cached price), which is what litellm's `cost_per_token` gives for a chat call without reasoning tokens.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Mapping
from pathlib import Path

TABLE = "model_prices_and_context_window_backup.json"
#: a model block's own prices, in dollars per million tokens: kept by sbpc, never sent
DECLARED = ("input_price", "output_price")
#: providers whose every model takes a JSON Schema, as litellm.supports_response_schema lists them
SCHEMA_PROVIDERS = ("predibase", "fireworks_ai", "lm_studio", "nebius", "databricks")


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


def entry(model: str, key: str) -> dict:
    """The table's entry saying `key` for a litellm model string or a provider-side name ({} when none does)."""
    for name in [model] + ([model.split("/", 1)[1]] if "/" in model else []):
        found = table().get(name)
        if isinstance(found, dict) and key in found:
            return found
    return {}


def cost(model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> float | None:
    """Dollars for these tokens on `model` (a litellm model string or a provider-side name); None when unpriced.
    `cached_tokens` of the prompt's, served by the provider's prompt cache, cost the table's
    `cache_read_input_token_cost` where it has one (else the full price)."""
    found = entry(model, "input_cost_per_token")
    if not found:
        return None
    full = float(found["input_cost_per_token"])
    cached = float(found.get("cache_read_input_token_cost") or full)
    return (
        (prompt_tokens - cached_tokens) * full
        + cached_tokens * cached
        + completion_tokens * float(found.get("output_cost_per_token", 0.0))
    )


def batch_cost(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """Dollars for these tokens on `model` sent through its provider's batch API, at the table's batch prices
    (`input_cost_per_token_batches`, `output_cost_per_token_batches`); None when the table gives none: a batch
    price is the provider's to say, never guessed from the full one."""
    found = entry(model, "input_cost_per_token_batches")
    if not found:
        return None
    return prompt_tokens * float(found["input_cost_per_token_batches"]) + completion_tokens * float(
        found.get("output_cost_per_token_batches", 0.0)
    )


def declared(settings: Mapping[str, object], prompt_tokens: int, completion_tokens: int) -> float | None:
    """Dollars for these tokens at the prices a model block declares (`input_price`, `output_price`, per million
    tokens); None when it declares none. A declared price is the user's (a contract, a local server's cost), so it
    stands before litellm's table."""
    prices = [settings.get(key) for key in DECLARED]
    if not any(isinstance(p, (int, float)) for p in prices):
        return None
    given = [float(p) if isinstance(p, (int, float)) else 0.0 for p in prices]
    return (prompt_tokens * given[0] + completion_tokens * given[1]) / 1_000_000


def supports_response_schema(model: str) -> bool:
    """Whether the model takes a JSON Schema in `response_format`, as `litellm.supports_response_schema` says:
    every model of some providers, and the models its table says take one."""
    provider = model.split("/", 1)[0] if "/" in model else ""
    return (
        provider in SCHEMA_PROVIDERS or entry(model, "supports_response_schema").get("supports_response_schema") is True
    )


def supports_function_calling(model: str) -> bool:
    """Whether the model calls tools natively (`tools=`), as litellm's table says (`supports_function_calling`)."""
    return entry(model, "supports_function_calling").get("supports_function_calling") is True


def marks_cache(model: str) -> bool:
    """Whether the model's provider caches a prompt's prefix only up to a marker the request sets (Anthropic's
    `cache_control`; OpenAI's and others' caches need none)."""
    provider = model.split("/", 1)[0] if "/" in model else entry(model, "litellm_provider").get("litellm_provider")
    return provider == "anthropic" or (provider is None and model.startswith("claude"))
