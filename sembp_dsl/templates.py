"""Jinja2, sandboxed: pipeline files are data from strangers, so their templates get no Python."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from jinja2 import StrictUndefined, TemplateSyntaxError, meta
from jinja2.sandbox import SandboxedEnvironment

ENV = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=False)

# A node without a template gets its prompt followed by one "name: value" line per input.
DEFAULT_TEMPLATE = "{{ prompt }}\n{% for name, value in inputs %}\n{{ name }}: {{ value }}{% endfor %}"

# Templates that drive the method itself; a pipeline may override any of them by
# declaring a template of the same name. Values: the variables each one may use.
BUILTIN = {
    "loss": {"task", "node", "output", "expected", "parse_error"},
    "backward": {"task", "node", "prompt", "context", "hints", "output", "feedback"},
    "backward_no_sibling": {"task", "node", "prompt", "context", "hints", "output", "feedback"},
    "optimizer": {"task", "node", "param", "prompt", "examples", "max_chars"},
}


@lru_cache(maxsize=None)
def builtin_source(name: str) -> str:
    return resources.files("sembp_dsl").joinpath("prompts", f"{name}.j2").read_text(encoding="utf-8")


@lru_cache(maxsize=4096)
def variables(source: str) -> frozenset[str]:
    """Names a template reads from its context (raises TemplateSyntaxError)."""
    return frozenset(meta.find_undeclared_variables(ENV.parse(source)))


@lru_cache(maxsize=4096)
def compile_template(source: str):
    return ENV.from_string(source)


__all__ = ["ENV", "DEFAULT_TEMPLATE", "BUILTIN", "builtin_source", "variables", "compile_template", "TemplateSyntaxError"]
