"""Codes of the YAML form (syntax/yaml_form.py), E06x, and E069, a model's `api_base`."""

from .code import Code

TABLE = [
    # E06x: the YAML form
    Code(
        "E060",
        "YAML syntax",
        "The file is not valid YAML (or nests more than 64 levels deep, or holds a character YAML forbids).\n"
        "The message is PyYAML's, located at the problem.",
        "pipeline: t\nnodes: [a",
        "pipeline: t\nnodes: [a]",
    ),
    Code(
        "E061",
        "YAML alias",
        "Aliases (`*name`) are refused: a few lines could expand into gigabytes, and a prompt written once\n"
        "must be written back once. One error per anchor.",
        "params:\n  p: &x Answer.\n  r: *x",
        "params:\n  p: Answer.\n  r: Answer.",
    ),
    Code(
        "E062",
        "YAML pipeline is not a mapping",
        "The top of a YAML pipeline is a mapping with the keys pipeline, nodes, output and the others of\n"
        "docs/language.md, 5.",
        "- pipeline: t",
        "pipeline: t\nnodes: {a: {type: text}}\noutput: a",
    ),
    Code(
        "E063",
        "YAML value the schema does not allow",
        "The YAML form is checked against its JSON Schema (`sbpc schema`): unknown keys, wrong types,\n"
        "unknown names and numbers out of range, each in words and at its place. Point your editor at the\n"
        "schema to see these as you type.",
        "pipeline: t\nmodles: {}",
        "pipeline: t\nmodels: {}",
    ),
    Code(
        "E064",
        "YAML value a pipeline cannot use",
        "A value its tag cannot hold (`!!int abc`), a value YAML reads as a date (quote it), `.nan` or\n"
        "`.inf`, or a control character in a string.",
        "description: 2024-01-01",
        'description: "2024-01-01"',
    ),
    Code(
        "E065",
        "unquoted choice type in YAML",
        "In a flow mapping the commas of `choice(Yes, No)` end the value, so the type must be quoted.",
        "nodes:\n  a: {type: choice(Yes, No)}",
        'nodes:\n  a: {type: "choice(Yes, No)"}',
    ),
    Code(
        "E066",
        "YAML key that is not a plain name",
        "Keys of a YAML pipeline are plain names, not lists or mappings.",
        "inputs:\n  [q]: text",
        "inputs:\n  q: text",
    ),
    Code(
        "E067",
        "duplicate YAML key",
        "A key appears twice in one mapping; YAML would silently keep the last. A `note:` points at the\nfirst.",
        "metric: exact\nmetric: json",
        "metric: json",
    ),
    Code(
        "E068",
        "bad YAML edge",
        'Each item of `edges` is one edge statement such as "a, b -> c"; its names are plain names and\n'
        "each `->` has names on both sides.",
        'edges:\n  - "q, 9ctx -> a ->"',
        'edges:\n  - "q, ctx -> a"',
    ),
    Code(
        "E069",
        "api_base is not an http(s) URL",
        "A model's `api_base` is the base URL of an OpenAI-compatible server: a scheme, a host and, if\n"
        "need be, a port from 0 to 65535. Without `http://` no request can go out (litellm would try for\n"
        "seconds, then blame the connection).",
        'model { name = "openai/m"  api_base = "127.0.0.1:8911/v1" }',
        'model { name = "openai/m"  api_base = "http://127.0.0.1:8911/v1" }',
    ),
]
