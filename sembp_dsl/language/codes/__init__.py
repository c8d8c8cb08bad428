"""Every diagnostic's stable code, with what `sbpc explain CODE` prints: a paragraph, a bad example, the fix.

Codes never change meaning once published: `E0xx` are errors (the file cannot be compiled), `W0xx` warnings.
A new check takes a new code; a check that goes away leaves its code unused. The ranges group the stages:
E00x syntax and strings, E01x files, E02x names, E03x settings and blocks, E04x graph, output and metric,
E05x templates, E06x the YAML form, E07x models (blocks and the nodes that name them), system messages and
record outputs, E08x function nodes (Python code in the graph), E09x demonstrations (demos params), E10x
metrics the file defines (a judge, a function), E11x nodes that call tools, E12x branches and maps, E13x data
named in the file (E136-E138: what optimize may change and what models cost; E139-E140: each split's own
data file), E15x code the file names, read before it runs, E16x data a run would refuse, E17x tools
from MCP servers; W0xx warnings.

Each module here holds the codes of one stage or concern (its `TABLE`), a new code going into the one whose
check reports it; this registry lists them all, in the order `sbpc explain` prints them.
"""

from __future__ import annotations

from . import before_run, data, flow, nodes, rules, syntax, tools, training, warnings, yaml_form
from .code import Code

_CODES = [  # in the order `sbpc explain` lists them
    *syntax.TABLE,
    *rules.TABLE,
    *yaml_form.TABLE,
    *nodes.TABLE,
    *training.TABLE,
    *tools.TABLE,
    *flow.TABLE,
    *data.TABLE,
    *before_run.TABLE,
    *warnings.TABLE,
]

CODES: dict[str, Code] = {c.code: c for c in _CODES}


def lookup(code: str) -> Code | None:
    """The code as written in any case, with or without leading zeros: e021, E21 and E021 are one code."""
    code = code.strip().upper()
    if len(code) > 1 and code[1:].isdigit():
        code = f"{code[0]}{int(code[1:]):03d}"
    return CODES.get(code)
