"""The package tree shows the stages, and no import runs back up: each part of sembp_dsl imports only
the parts before it in LAYERS (function-level imports included)."""

import ast
from pathlib import Path

import sembp_dsl

PACKAGE = Path(sembp_dsl.__file__).parent
LAYERS = [
    "errors",
    "files",
    "usercode",
    "telemetry",
    "language",
    "models",
    "runtime",
    "records",
    "learning",
    "api",
    "compare",
    "serve",
    "cli",
]
# Inside language/, the same rule: each room (a folder, or a module of its own) imports only those before it, so
# the tree reads as the stages a pipeline goes through: text -> IR -> checked IR -> Graph, and the tools over them.
LANGUAGE = [
    "ir",  # the typed IR every stage reads
    "codes",  # every diagnostic's code and `sbpc explain` page
    "diagnostics",  # located messages
    "syntax",  # text -> IR
    "blocks",  # what the file's blocks name outside it: settings, data, providers, Python code
    "nodes",  # what every node is made of: its compiled form, flow, prompt, reply, metric, trace
    "messages",  # what a kind and a model say to each other, typed: messages, tool calls, a request, a reply
    "signatures",  # a tool's JSON Schema, read from its source
    "mcp_servers",  # tools from MCP servers
    "kinds",  # what each kind of node adds
    "check",  # IR -> checked IR
    "graph",  # checked IR -> Graph
    "tooling",  # fmt, write-back, the editor's answers, the emitters
]
# A type a module names for the type checker only (under `if TYPE_CHECKING:`) imports nothing at run time; each
# one from a later stage is listed here, so that none creeps in unseen.
TYPE_ONLY = {"language/nodes/trace.py imports models.faults"}  # a NodeTrace's `failure`: why a model call failed


def _part(module: str) -> str:
    """The layer of a dotted module name inside sembp_dsl ("language.ir" -> "language", "" -> the package)."""
    return module.split(".")[0]


def _imports(path: Path, type_only: bool = False) -> set[str]:
    """The sembp_dsl modules that a file imports, as dotted names below the package: those it imports at run time
    (function-level imports included), or (`type_only`) those it imports under `if TYPE_CHECKING:`."""
    here = path.relative_to(PACKAGE).with_suffix("").parts
    package = list(here[:-1]) if here[-1] != "__init__" else list(here[:-1])
    tree = ast.parse(path.read_text(encoding="utf-8"))
    checking = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    typed = {id(node) for block in checking for statement in block.body for node in ast.walk(statement)}
    found = set()
    for node in ast.walk(tree):
        if (id(node) in typed) != type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            target = ".".join([*base, node.module] if node.module else base)
            names = [target] if node.module else [f"{target}.{a.name}".lstrip(".") for a in node.names]
            found.update(names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found.update(m.removeprefix("sembp_dsl.") for m in mods if m.startswith("sembp_dsl."))
    return found


def test_every_module_sits_in_a_layer():
    parts = {p.relative_to(PACKAGE).with_suffix("").parts[0] for p in PACKAGE.rglob("*.py")}
    assert parts - {"__init__"} <= set(LAYERS), parts - set(LAYERS)


def _upward(type_only: bool) -> list[str]:
    upward = []
    for path in PACKAGE.rglob("*.py"):
        me = path.relative_to(PACKAGE).with_suffix("").parts[0]
        if me == "__init__":
            continue
        for target in _imports(path, type_only):
            part = _part(target)
            if part in LAYERS and LAYERS.index(part) > LAYERS.index(me):
                upward.append(f"{path.relative_to(PACKAGE)} imports {target}")
    return upward


def test_no_import_runs_back_up():
    upward = _upward(type_only=False)
    assert not upward, upward


def _room(module: str) -> str | None:
    """The room of a dotted module inside language/ ("language.check.checker" -> "check"), None outside it."""
    parts = module.split(".")
    return parts[1] if parts[0] == "language" and len(parts) > 1 else None


def test_inside_language_no_import_runs_back_up():
    upward = []
    for path in (PACKAGE / "language").rglob("*.py"):
        me = _room(".".join(path.relative_to(PACKAGE).with_suffix("").parts))
        if me is None:  # language/__init__.py
            continue
        for target in _imports(path) | _imports(path, type_only=True):
            room = _room(target)
            if room is not None and LANGUAGE.index(room) > LANGUAGE.index(me):
                upward.append(f"{path.relative_to(PACKAGE)} imports {target}")
    assert not upward, upward


def test_every_room_of_language_sits_in_its_order():
    rooms = {p.stem for p in (PACKAGE / "language").iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()}
    assert rooms - {"__init__"} == set(LANGUAGE)


def test_a_type_from_a_later_stage_is_named_for_the_type_checker_only_where_listed():
    assert set(_upward(type_only=True)) == TYPE_ONLY


def test_the_layers_are_the_tree():
    """Each stage is a folder; the interfaces sit at the top of the package."""
    for stage in ("language", "models", "runtime", "records", "learning", "cli"):
        assert (PACKAGE / stage / "__init__.py").is_file()
    for room in ("syntax", "blocks", "nodes", "kinds", "check", "graph", "tooling"):
        assert (PACKAGE / "language" / room / "__init__.py").is_file()
    assert not [
        p.name
        for p in PACKAGE.glob("*.py")
        if p.stem not in ("__init__", "api", "compare", "serve", "errors", "files", "usercode", "telemetry")
    ]


def test_the_readme_map_names_every_module():
    """README's Layout section is where a newcomer reads the tree: a module it does not name is a room nobody
    was shown."""
    readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout") :].split("\n## ")[0]
    modules = {p.name for p in PACKAGE.rglob("*.py") if p.stem not in ("__init__", "__main__")}
    assert not sorted(name for name in modules if name not in layout)


def _module_names() -> set[str]:
    """Every module of the package as a dotted name below it ("cli.lsp"; "" is the package itself)."""
    names = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _edges(module: str, source: str, known: set[str]) -> set[str]:
    """The package's modules that `module` imports at run time, at module level or in a function (what it names
    under `if TYPE_CHECKING:` never runs). `from X import y` counts as importing X.y when y is a module."""
    tree = ast.parse(source)
    checking = [n for n in ast.walk(tree) if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    typed = {id(node) for block in checking for statement in block.body for node in ast.walk(statement)}
    here = module.split(".") if module else []
    package = here if (PACKAGE / Path(*here) / "__init__.py").is_file() and here else here[:-1]
    found = set()
    for node in ast.walk(tree):
        if id(node) in typed:
            continue
        if isinstance(node, ast.Import):
            targets = [
                a.name.removeprefix("sembp_dsl").lstrip(".") for a in node.names if a.name.split(".")[0] == "sembp_dsl"
            ]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                origin = ".".join([*base, node.module] if node.module else base)
            elif (node.module or "").split(".")[0] == "sembp_dsl":
                origin = (node.module or "").removeprefix("sembp_dsl").lstrip(".")
            else:
                continue
            inner = [f"{origin}.{a.name}".lstrip(".") for a in node.names]
            targets = [name if name in known else origin for name in inner]
        else:
            continue
        found.update(t for t in targets if t in known and t != module)
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def _import_graph() -> dict[str, set[str]]:
    known = _module_names()
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph[module] = _edges(module, path.read_text(encoding="utf-8"), known)
    return graph


def test_no_module_is_part_of_an_import_circle():
    assert _cycles(_import_graph()) == []


def test_an_import_circle_is_found_through_relative_and_function_level_imports():
    known = {"cli", "cli.commands", "cli.lsp", "cli.routers", "language", "language.source"}
    commands = "from .lsp import serve\n"
    lsp = "def f():\n    from . import commands\n    from ..language import source\n"
    graph = {
        "cli.commands": _edges("cli.commands", commands, known),
        "cli.lsp": _edges("cli.lsp", lsp, known),
        "language.source": _edges("language.source", "from ..cli.routers import x\n", known),
    }
    assert graph["cli.lsp"] == {"cli.commands", "language.source"}
    assert _cycles(graph) == [["cli.commands", "cli.lsp"]]
    assert _cycles({**graph, "cli.lsp": {"language.source"}}) == []


#: The keys of OpenAI's chat-completions JSON no other shape of sbpc's uses (a message's "role" beside its
#: "content" is the shape too; the GenAI conventions' messages in spans have "role" beside "parts").
WIRE_KEYS = {"tool_calls", "tool_call_id", "choices"}


def _wire_uses(path: Path) -> list[str]:
    """Where a module reads or writes the chat-completions shape: one of WIRE_KEYS as a dict key, a subscript or
    a `.get()`, or a dict with both "role" and "content"."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        keys: list[ast.expr] = []
        if isinstance(node, ast.Dict):
            named = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"role", "content"} <= named:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} a message")
            keys = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Subscript):
            keys = [node.slice]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "get" and node.args:
            keys = [node.args[0]]
        found += [
            f"{path.relative_to(PACKAGE)}:{node.lineno} {key.value}"
            for key in keys
            if isinstance(key, ast.Constant) and key.value in WIRE_KEYS
        ]
    return found


def test_one_module_knows_the_chat_message_wire_shape():
    """Kinds, the runtime, spans and every transport pass typed messages and replies (language/messages.py); only
    models/wire.py writes them as the JSON a provider takes and reads its replies back."""
    knowing = {use.split(":")[0] for path in PACKAGE.rglob("*.py") for use in _wire_uses(path)}
    assert knowing == {"models/wire.py"}, sorted(use for p in PACKAGE.rglob("*.py") for use in _wire_uses(p))
