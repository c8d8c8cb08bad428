"""The settings each block and declaration takes (key -> accepted types or words, and number bounds), and the
checks of a block's settings: model blocks (provider, price), optimize, data and MCP server blocks."""

from __future__ import annotations

from collections.abc import Mapping

from .. import ir, mcp_servers
from ..blocks.data import DATA_SETTINGS, SIZE_OR_FILE, check_data_blocks
from ..blocks.method import SETTINGS, within
from ..blocks.providers import PROVIDERS, no_provider, provider_of
from ..diagnostics import suggestion, suggestion_or_list, url_problem
from ..kinds import KINDS
from ..nodes import maps
from .context import Context, first_here

# Allowed settings: key -> accepted Python types, or the tuple of allowed names.
NUMBER = (int, float)
NODE_SETTINGS = {key: accepted for kind in KINDS.values() for key, accepted in kind.accepts.items()}  # any kind's
MODEL_SETTINGS = {
    "name": (str,),
    "temperature": NUMBER,
    "top_p": NUMBER,
    "max_tokens": (int,),
    "seed": (int,),
    "api_base": (str,),
    "api_key_env": (str,),
    "timeout": NUMBER,
    "stop": (str,),
    "router": (str,),
    "concurrency": (int,),
    "rpm": (int,),
    "tpm": (int,),
    "constrain": ("auto", "off", "schema"),
    "input_price": NUMBER,  # dollars per million prompt tokens (prices.DECLARED)
    "output_price": NUMBER,  # dollars per million completion tokens
}
OPTIMIZE_SETTINGS: dict[str, tuple] = {
    name: s.words or ((int, float) if s.kind is float else (int,)) for name, s in SETTINGS.items()
}
OPTIMIZE_SETTINGS["models"] = (tuple,)  # the named models nodes may move to: `models = [fast, strong]`
OPTIMIZE_SETTINGS["strategies"] = (tuple,)  # the strategies a step may use: `strategies = [gradients, models]`
PRICES = ("input_price", "output_price")
# What a `function` declaration's block takes: how a model is told of it as a tool (a param), and how long a call
# of it may take.
FUNCTION_SETTINGS: dict[str, tuple] = {"description": (str,), "timeout": (int, float)}
BLOCKS: dict[str, dict[str, tuple]] = {
    "model": MODEL_SETTINGS,
    "optimize": OPTIMIZE_SETTINGS,
    "data": DATA_SETTINGS,
    mcp_servers.KIND: mcp_servers.SERVER_SETTINGS,
}
# Number settings: (smallest, largest, smallest excluded). Beyond these a run would surely fail or never end.
BOUNDS = {
    "temperature": (0, 2, False),
    "top_p": (0, 1, False),
    "max_tokens": (1, 10_000_000, False),
    "seed": (-(2**63), 2**63 - 1, False),
    "timeout": (0, 86_400, True),  # a model's, or a function node's
    "concurrency": (1, 100_000, False),
    "rpm": (1, 10_000_000_000, False),
    "tpm": (1, 10_000_000_000, False),
    **{price: (0, 1_000_000, False) for price in PRICES},  # dollars per million tokens
    "train": (0, 10_000_000, False),  # a data block's sizes
    "validation": (0, 10_000_000, False),
    "test": (0, 10_000_000, False),
    "max_items": (1, maps.MAX_ITEMS, False),
    **{name: (s.low, s.high, s.low_excluded) for name, s in SETTINGS.items() if not s.choices},
}
SPELLINGS = {word for s in SETTINGS.values() for word in s.spellings}  # taken, but not listed as choices


def check_settings(cx: Context, where: str, settings, allowed: Mapping[str, tuple]) -> None:
    seen: dict[str, ir.Setting] = {}
    for s in settings:
        if s.key in seen:
            cx.report("E031", s.span, f"duplicate setting '{s.key}' in {where}", notes=[first_here(seen[s.key].span)])
        seen.setdefault(s.key, s)
        accepted = allowed.get(s.key)
        if accepted is None:
            cx.report("E030", s.span, f"unknown setting '{s.key}' in {where}", help=suggestion_or_list(s.key, allowed))
        elif isinstance(accepted[0], str):
            if s.value not in accepted:
                listed = [word for word in accepted if word not in SPELLINGS]
                cx.report(
                    "E032",
                    s.value_span,
                    f"'{s.key}' must be one of {', '.join(listed)}, not {s.value!r}",
                    help=suggestion(str(s.value), listed),
                )
        elif isinstance(s.value, bool) or not isinstance(s.value, accepted):
            words = {str: "a string", int: "an integer", float: "a number", tuple: "a list of names"}
            kind = "a size (an integer) or a file (a string)" if accepted == SIZE_OR_FILE else words[accepted[-1]]
            cx.report("E033", s.value_span, f"'{s.key}' must be {kind}, not {s.value!r}")
        elif s.key in BOUNDS:
            check_bounds(cx, s)


def check_bounds(cx: Context, s: ir.Setting) -> None:
    low, high, exclusive = BOUNDS[s.key]
    if isinstance(s.value, (int, float)) and not within(s.value, low, high, exclusive):
        low_text = f"more than {low}" if exclusive else f"at least {low}"
        cx.report("E034", s.value_span, f"'{s.key}' must be {low_text} and at most {high:,}, not {s.value!r}")


def check_blocks(cx: Context) -> None:
    for block in cx.p.blocks:
        check_block(cx, block)
    check_data_blocks(cx.p, cx.report)


def check_block(cx: Context, block: ir.Block) -> None:
    allowed = BLOCKS.get(block.kind)
    if allowed is None:
        cx.report("E035", block.span, f"unknown block '{block.kind}'", help=suggestion_or_list(block.kind, BLOCKS))
        return
    if block.kind == "model" and block.name == "default":
        cx.report(
            "E079",
            block.span,
            "a model cannot be named 'default'",
            help="settings every model shares go in `model { }`",
        )
    if block.kind == "optimize" and block.name is not None:
        cx.report("E037", block.span, "an optimize block takes no name")
    if block.kind == mcp_servers.KIND:
        own = [s for s in block.settings if "." not in s.key]  # `search.description`: its tool's, checked there
        check_settings(cx, f"mcp block '{block.name}'", own, allowed)
        mcp_servers.check_server(cx.report, block, cx.params)
        return
    check_settings(cx, f"{block.kind} block", block.settings, allowed)
    base = next((s for s in block.settings if s.key == "api_base" and isinstance(s.value, str)), None)
    problem = url_problem(str(base.value)) if base is not None else None
    if base is not None and problem:
        cx.report("E069", base.value_span, f"api_base {problem}")
    if block.kind == "model":
        check_provider(cx, block)
        check_price(cx, block)


def check_price(cx: Context, block: ir.Block) -> None:
    """A declared price names both halves (here, or in an unnamed block it takes its settings from): a call is
    charged for its prompt and its reply, and a missing half would be charged nothing."""
    shared = {s.key for b in cx.p.blocks if b.kind == "model" and b.name is None for s in b.settings}
    own = {s.key: s for s in block.settings if s.key in PRICES}
    missing = [key for key in PRICES if key not in own and key not in shared]
    if own and missing:
        first = next(iter(own.values()))
        cx.report(
            "E137",
            first.span,
            f"'{first.key}' without '{missing[0]}': a declared price needs both",
            help=f"add `{missing[0]} = ...` (dollars per million tokens; 0 if free)",
        )


def check_provider(cx: Context, block: ir.Block) -> None:
    """A model name's provider is one litellm knows: a misspelt one (`opneai/...`) would fail only at the first
    call, blamed on the server. A Router's model group is its own name, whatever it looks like."""
    keys = {s.key for s in block.settings}
    name = next((s for s in block.settings if s.key == "name" and isinstance(s.value, str)), None)
    provider = provider_of(str(name.value)) if name is not None and "router" not in keys else None
    bare = no_provider(str(name.value)) if name is not None and "router" not in keys else None
    if name is not None and bare is not None:
        cx.report("E161", name.value_span, bare[0], help=bare[1])
    if name is not None and provider is not None and provider not in PROVIDERS:
        cx.report(
            "E128",
            name.value_span,
            f"unknown provider '{provider}' in model name '{name.value}'",
            help=suggestion(provider, sorted(PROVIDERS))
            or "a model name is `provider/model`, e.g. openai/gpt-4o-mini (`openai/...` for any OpenAI-compatible server)",
        )
