"""Codes of reading a file and parsing its text (syntax/): E00x syntax and strings, E01x files."""

from .code import Code

TABLE = [
    # E00x: syntax and strings
    Code(
        "E001",
        "unexpected token",
        "The parser met a word or symbol it cannot take at this point of a statement. The message says what\n"
        "it found and what it could have taken; a misspelt keyword gets a `help:` with the closest one. After\n"
        "a syntax error the broken statement is skipped, so every broken statement of a file is reported.",
        "pipeline t\ninput q: txt\nnode a: text {}\nq -> a\noutput a",
        "pipeline t\ninput q: text\nnode a: text {}\nq -> a\noutput a",
    ),
    Code(
        "E002",
        "unexpected character",
        "A character that no token of the language starts with, such as `@`, `!` or a stray control\n"
        "character. Names are ASCII letters, digits and `_`; text belongs in strings.",
        "node a: text { prompt = p @ }",
        "node a: text { prompt = p }",
    ),
    Code(
        "E003",
        "unterminated string",
        'A string is missing its closing quotes. A `"..."` string must close on its own line; a `"""` block\n'
        'string runs to the next `"""`, so one missing closer swallows the rest of the file.',
        'param p = "Answer the question.',
        'param p = "Answer the question."',
    ),
    Code(
        "E004",
        "invalid escape sequence in string",
        'A `"..."` string takes JSON escapes only: \\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX. Any other backslash\n'
        'is an error. A block string (`"""`) has no escapes: write a backslash there as it is.',
        'param p = "C:\\path"',
        'param p = "C:\\\\path"        # or: param p = """C:\\path"""',
    ),
    Code(
        "E005",
        "closing quotes of a block string not on a line of their own",
        'A block string that starts with a newline after `"""` is dedented by the indentation of its\n'
        "closing quotes, so those must stand on a line of their own with only spaces or tabs before them.",
        'param p = """\n  Answer the question."""',
        'param p = """\n  Answer the question.\n  """',
    ),
    Code(
        "E006",
        "block string line indented less than its closing quotes",
        "The indentation of a block string's closing quotes is removed from every line; a line that is\n"
        "not blank and indented less than them cannot lose it. Tabs and spaces are compared as written.",
        'param p = """\n  Answer.\nBe brief.\n  """',
        'param p = """\n  Answer.\n  Be brief.\n  """',
    ),
    Code(
        "E007",
        "control character in a string",
        "Strings are prompts, and a prompt holds text: a control character other than tab, newline and\n"
        "carriage return (an escape sequence, a bell, a NUL) is garbage to a model and a way for a hostile\n"
        "file to drive a terminal.",
        'param p = "red \\u001b[31m text"',
        'param p = "red text"',
    ),
    Code(
        "E008",
        "half a surrogate pair in a string",
        "A `\\uXXXX` escape between D800 and DFFF is half of a UTF-16 pair and no character on its own: no\n"
        "file or model accepts it. A whole pair, such as `\\ud83d\\ude00`, is one character and is fine.",
        'param p = "half \\ud800 a pair"',
        'param p = "a whole pair: \\ud83d\\ude00"',
    ),
    Code(
        "E009",
        "a `{` is never closed",
        "A node or block opened with `{` runs to the next statement without its `}`. The parser only notices\n"
        "a statement later (it reads `node` as one more setting), so the error points back at the `{`.",
        "node a: text { prompt = p\nnode b: text {}",
        "node a: text { prompt = p }\nnode b: text {}",
    ),
    # E01x: files
    Code(
        "E010",
        "no such file",
        "The path names no file (or a symbolic link whose target is gone).",
        "sbpc check pipelnes/liar.sbp",
        "sbpc check pipelines/liar.sbp",
    ),
    Code(
        "E011",
        "not a regular file",
        "A pipeline is read from a regular file. A directory, a FIFO, a socket or a device is refused\n"
        "before it is read, so a path can never block the command.",
        "sbpc check pipelines/",
        "sbpc check pipelines/*.sbp",
    ),
    Code(
        "E012",
        "file too large",
        "A pipeline file may be at most 64 MB: far beyond any real pipeline, whose prompts could not be\n"
        "sent to a model anyway. The size is checked before the file is read.",
        "sbpc check dump.sbp        # 80 MB",
        "Keep data in data sets (--data), not in the pipeline file.",
    ),
    Code(
        "E013",
        "file cannot be read",
        "The operating system refused to read the file (no permission, a name too long, an I/O error);\n"
        "the message gives its reason.",
        "sbpc check secret.sbp      # mode 000",
        "chmod u+r secret.sbp",
    ),
    Code(
        "E014",
        "invalid UTF-8",
        "Pipeline files are UTF-8 text (a byte order mark is allowed). The error points at the first byte\n"
        "that is not UTF-8, often a file saved as Latin-1 or UTF-16.",
        'param p = "caf\\xe9"        # the byte 0xe9 of Latin-1',
        "Save the file as UTF-8 (iconv -f latin1 -t utf-8 old.sbp > new.sbp).",
    ),
    Code(
        "E015",
        "unknown kind of file",
        "sbpc reads `.sbp` files and their YAML twin (`.yaml`, `.yml`), and tells them apart by suffix.",
        "sbpc check pipeline.txt",
        "mv pipeline.txt pipeline.sbp",
    ),
    Code(
        "E016",
        "interrupted write",
        "sbpc rewrites a file with other hard links in place, after saving the whole new text beside it as\n"
        "`.NAME.sbpc-tmp`. That copy is still there, so the last such write was killed midway and the file\n"
        "may hold part new and part old text. The message names the copy. When the write was an optimize\n"
        "run's, `sbpc optimize ... --resume` finishes it (the copy is the text the run recorded it was writing).",
        "sbpc check liar.sbp        # .liar.sbp.sbpc-tmp is beside it",
        "cp .liar.sbp.sbpc-tmp liar.sbp && rm .liar.sbp.sbpc-tmp    # or rm it to keep the file as it is",
    ),
]
