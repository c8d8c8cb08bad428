"""Codes of what a run would fail on, found before it runs: E150 code the file names, E161 a model name with no
provider, E162 an output no input reaches."""

from .code import Code

TABLE = [
    # E150-E159: code the file names, read before it runs
    Code(
        "E150",
        "an async metric",
        "A Python metric is called with (prediction, example) and returns a score: a bool, a number from 0 to\n"
        "1, or (score, reason). sbpc calls it in a worker thread and does not await what it returns, so an\n"
        "`async def` metric can never score. `check` reads the module beside the pipeline (never imports it)\n"
        "and refuses one; a metric from an allowed module is refused when a run first scores with it.",
        "async def overlap(prediction, example):\n    return 1.0",
        "def overlap(prediction, example):\n    return 1.0",
    ),
    Code(
        "E161",
        "a model name with no provider",
        "A model name is `provider/model`; a bare name is looked up in litellm's table of models (gpt-4o-mini,\n"
        "claude-3-5-sonnet-latest, ...), and a name it does not know is refused before any request is sent\n"
        "(`LLM Provider NOT provided`). Name the provider (`openai/...` with `api_base` reaches any\n"
        "OpenAI-compatible server), or fix the spelling.",
        'model forward { name = "gpt-4o-mni" }',
        'model forward { name = "gpt-4o-mini" }',
    ),
    Code(
        "E162",
        "an output no input reaches",
        "No path of edges leads from any input to the output, so every sample would send the same prompts and\n"
        "get the same answer: no score could tell one prompt from another. (An input that reaches no node is\n"
        "only a warning, W003, while another feeds the output.) Add the edge that feeds it.",
        "input q: text\nnode a: text { prompt = p }\noutput a",
        "input q: text\nnode a: text { prompt = p }\nq -> a\noutput a",
    ),
]
