"""Codes of the data block and what optimize may change: E13x data named in the file (E136-E138: what
optimize may change and what models cost; E139-E140: each split's own file), E160 data a run would refuse."""

from .code import Code

TABLE = [
    # E13x: data named in the file
    Code(
        "E130",
        "named data block",
        "A pipeline draws its examples from one data file, so the data block takes no name.",
        'data tickets { file = "tickets.jsonl" }',
        'data { file = "tickets.jsonl" }',
    ),
    Code(
        "E131",
        "data block without a file",
        "A data block names the file a run reads its examples from (a .jsonl, .csv or .tsv file, relative\n"
        "to the pipeline's folder); its sizes and seed cut that file, so without it they cut nothing. With\n"
        'each split\'s own file, `train = "train.jsonl"` is the one a run cannot do without: validation and\n'
        "test files alone leave optimize nothing to learn from.",
        "data { train = 20  validation = 20 }",
        'data { file = "tickets.jsonl"  train = 20  validation = 20 }',
    ),
    Code(
        "E132",
        "a size set twice",
        "A data block's `train`, `validation`, `test` and `seed` are the optimize block's `train_size`,\n"
        "`val_size`, `test_size` and `seed`. Saying one in both places leaves the reader to guess which\n"
        "wins: keep it in one (beside the data is where a reader looks for how it is cut).",
        'data { file = "tickets.jsonl"  train = 20 }\noptimize { train_size = 30 }',
        'data { file = "tickets.jsonl"  train = 30 }',
    ),
    Code(
        "E133",
        "a second data block",
        "A pipeline names one data file; a command's --data gives another for one run.",
        'data { file = "a.jsonl" }\ndata { file = "b.jsonl" }',
        'data { file = "a.jsonl" }',
    ),
    Code(
        "E134",
        "the data file cannot be used",
        "`sbpc check` reads the file the data block names, as a run would: one that is missing, unreadable,\n"
        "has no answer column (answer, label or target) or has bad rows is reported here, every bad row\n"
        "with its line. The path is relative to the pipeline's folder, not to where sbpc runs.",
        'data { file = "tickets.jsnol" }',
        'data { file = "tickets.jsonl" }',
    ),
    Code(
        "E135",
        "an input the data does not have",
        "Each input reads the data field of its name (or the one `from` names), and the output's `from`\n"
        "names the answer's field (without it, a column named answer, label or target); the data file the\n"
        "block names has no such field. Rename the input, say which field it reads, or pass --map\n"
        'INPUT=FIELD for one run; name the answer\'s column with `output NODE from "COLUMN"`.',
        'input text: text          # the file has "message", not "text"',
        "input text: text from message",
    ),
    # E136-E138: what optimize may change and what models cost
    Code(
        "E136",
        "undefined strategy",
        "The optimize block's `strategies` names the kinds of change a step may make: `gradients` (prompts\n"
        "rewritten from the backward pass's feedback), `demos` (examples drawn from right answers) and\n"
        "`models` (a node moved to another of its `models`). A name that is none of them would be dropped.",
        "optimize { strategies = [gradients, model] }",
        "optimize { strategies = [gradients, models] }",
    ),
    Code(
        "E137",
        "half a declared price",
        "A model block may declare what its calls cost, in dollars per million tokens: `input_price` for the\n"
        "prompt and `output_price` for the reply. sbpc charges, plans and compares models by it (before\n"
        "litellm's table), so a missing half would be charged nothing. Give both (0 where it is free).",
        'model fast { name = "openai/my-model"  input_price = 0.15 }',
        'model fast { name = "openai/my-model"  input_price = 0.15  output_price = 0.6 }',
    ),
    Code(
        "E138",
        "a node's models without a model of its own",
        "A node's `models = [...]` lists the models the optimizer may move it to; a move rewrites the node's\n"
        "`model = ...` line, so the node must name a model of its own (a `model NAME { }` block), not a role.",
        "node draft: text { prompt = p  models = [fast, strong] }",
        "node draft: text { prompt = p  model = strong  models = [fast, strong] }",
    ),
    # E139-E140: each split's own file in the data block
    Code(
        "E139",
        "one pool and splits' own files",
        "A data block names its examples one of two ways: `file`, one pool that the sizes (`train = 20`) cut\n"
        'into train, validation and test; or each split\'s own file (`train = "train.jsonl"`, `validation`,\n'
        "`test`), each split drawn from its file alone. Both at once would leave the reader to guess which\n"
        "rows each split holds. The sizes of splits with files of their own go in the optimize block.",
        'data { file = "all.jsonl"  test = "test.jsonl" }',
        'data { train = "train.jsonl"  test = "test.jsonl" }',
    ),
    Code(
        "E140",
        "one file for two splits",
        "Each split named by a file is drawn from that file alone, so the test split is never trained on. Two\n"
        "splits naming the same file would draw from the same rows: the score on one would say nothing of the\n"
        "other. Give each its own file, or name one pool with `file` and cut it by sizes (disjoint splits).\n"
        "A link, a hard link or another spelling of the path names the same file, and is the same mistake.",
        'data { train = "rows.jsonl"  test = "rows.jsonl" }',
        'data { file = "rows.jsonl"  train = 20  test = 50 }',
    ),
    # E16x: data a run would refuse, found by check
    Code(
        "E160",
        "sizes larger than the data",
        "The sizes the data block (or the optimize block) gives add up to more rows than the data file\n"
        "holds, so `eval` and `optimize` would refuse to cut it. Sizes left out are never refused: a run\n"
        "scales sbpc's defaults down to fit a small file, and says so.",
        'data { file = "tickets.jsonl"  train = 20  validation = 20 }   # the file has 22 rows',
        'data { file = "tickets.jsonl"  train = 11  validation = 11 }',
    ),
]
