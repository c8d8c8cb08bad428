"""The codes only the tool loop's own checks report, with their `sbpc explain` pages: E110-E111 (its `tools` and
`max_steps`) and W035-W037 (a tool the model is told too little of). Those the checker or the graph reports too
(E112-E113, E174-E175) stay in codes/tools.py."""

from ...codes.code import Code

CODES = (
    Code(
        "E110",
        "a tool that is not a declared function",
        "`tools = [...]` names the functions the node's model may call. Each must be declared in the file with\n"
        '`function NAME = "module:function"`, where the checker reads its signature (without importing it).',
        "node solve: text { prompt = task  tools = [lokup] }",
        'function lookup = "tools:lookup"\nnode solve: text { prompt = task  tools = [lookup] }',
    ),
    Code(
        "E111",
        "max_steps below 1",
        "`max_steps` is how many replies the model may give at a tool loop, the last of which answers: at\n"
        "least 1 (one reply, which must answer at once).",
        "node solve: text { prompt = task  tools = [lookup]  max_steps = 0 }",
        "node solve: text { prompt = task  tools = [lookup]  max_steps = 4 }",
    ),
    Code(
        "W035",
        "a tool argument without a type",
        "An argument with no type hint (or a server's property with no type) is offered to the model as any\n"
        "JSON value, so nothing tells it what to send and nothing checks what it sends.",
        "def lookup(place, fact: str) -> str: ...",
        "def lookup(place: str, fact: str) -> str: ...",
    ),
    Code(
        "W036",
        "a tool without a description",
        "A tool with no docstring (or a server's tool with no description) is offered with an empty description:\n"
        "the model sees its name alone. A description param (`description = lookup_doc`) also lets the\n"
        "optimizer improve it.",
        "def lookup(place: str) -> str:\n    return FACTS[place]",
        'def lookup(place: str) -> str:\n    """Look up one fact about a place."""',
    ),
    Code(
        "W037",
        "a tool argument without a description",
        "Each argument's description comes from the docstring's `Args:` lines (or the server's schema); one\n"
        "without leaves the model to guess from its name.",
        'def lookup(place: str) -> str:\n    """Look up one fact about a place."""',
        'def lookup(place: str) -> str:\n    """Look up one fact about a place.\n\n    Args:\n        place: the place\'s name alone\n    """',
    ),
)
