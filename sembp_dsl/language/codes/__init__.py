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
check reports it. A code only one kind of node reports is that kind's own (`NodeKind.codes`, in kinds/): this
floor sits below the kinds and cannot import them, so kinds/ hands it where they are (`declared_by`), asked each
time a code is listed or looked up. CODES lists them all, in the order `sbpc explain` prints them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

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

_DECLARERS: list[Callable[[], Iterable[Code]]] = []  # where codes declared above this floor are found


def declared_by(declarer: Callable[[], Iterable[Code]]) -> None:
    """Codes declared outside the tables (kinds/ hands over its registry's: every kind's own), found afresh on
    each lookup, so a kind registered later is seen too."""
    _DECLARERS.append(declarer)


def listed() -> list[Code]:
    """Every code, in the order `sbpc explain` lists them: the tables', and each declared code after the nearest
    code below it (E141 after E140), so the list reads the same wherever a code is declared."""
    codes = list(_CODES)
    for code in sorted((c for declarer in _DECLARERS for c in declarer()), key=lambda c: c.code):
        below = [i for i, c in enumerate(codes) if c.code[0] == code.code[0] and c.code < code.code]
        codes.insert(max(below, key=lambda i: codes[i].code) + 1 if below else len(codes), code)
    return codes


class _Registry(Mapping[str, Code]):
    """Every code by name, the tables' and those declared by the kinds (read-only; see `listed`)."""

    def _codes(self) -> dict[str, Code]:
        return {c.code: c for c in listed()}

    def __getitem__(self, code: str) -> Code:
        return self._codes()[code]

    def __iter__(self) -> Iterator[str]:
        return iter(self._codes())

    def __len__(self) -> int:
        return len(self._codes())


CODES: Mapping[str, Code] = _Registry()


def lookup(code: str) -> Code | None:
    """The code as written in any case, with or without leading zeros: e021, E21 and E021 are one code."""
    code = code.strip().upper()
    if len(code) > 1 and code[1:].isdigit():
        code = f"{code[0]}{int(code[1:]):03d}"
    return CODES.get(code)
