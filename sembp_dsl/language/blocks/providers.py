"""The providers a model name may start with (`openai/gpt-4o-mini`): litellm's, and sbpc's own.

`check` tells a misspelt provider (`opneai/...`) before a run sends a call, without importing litellm (about
a second of startup); tests/test_providers.py keeps this list equal to `litellm.provider_list`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

from ..diagnostics import suggestion

OWN = frozenset({"embedded"})  # served in-process (models/embedded.py), registered with litellm on use

LITELLM = frozenset(
    {
        "a2a",
        "a2a_agent",
        "abliteration",
        "ai21",
        "ai21_chat",
        "aiand",
        "aiml",
        "aiohttp_openai",
        "amazon_nova",
        "anthropic",
        "anthropic_text",
        "apertis",
        "assemblyai",
        "auto_router",
        "aws_polly",
        "aws_textract",
        "azure",
        "azure_ai",
        "azure_speech",
        "azure_text",
        "baseten",
        "bedrock",
        "bedrock_mantle",
        "bespoke",
        "bigmodel",
        "black_forest_labs",
        "bytez",
        "cerebras",
        "charity_engine",
        "chatgpt",
        "chutes",
        "clarifai",
        "clf_ai_gateway",
        "cloudflare",
        "codestral",
        "cognition",
        "cohere",
        "cohere_chat",
        "cometapi",
        "compactifai",
        "coralbricks",
        "cortecs",
        "cursor",
        "custom",
        "custom_openai",
        "darkbloom",
        "dashscope",
        "databricks",
        "databricks_agent",
        "datarobot",
        "deepgram",
        "deepinfra",
        "deepseek",
        "docker_model_runner",
        "dotprompt",
        "edenai",
        "elevenlabs",
        "empiriolabs",
        "empower",
        "eu_jev",
        "fal_ai",
        "featherless_ai",
        "fireworks_ai",
        "friendliai",
        "galadriel",
        "gdc",
        "gemini",
        "gigachat",
        "github",
        "github_copilot",
        "gradient_ai",
        "groq",
        "helicone",
        "heroku",
        "hosted_vllm",
        "hostinger_router",
        "huggingface",
        "humanloop",
        "hyperbolic",
        "inception",
        "inferenceapis",
        "infinity",
        "jina_ai",
        "kyma",
        "lambda_ai",
        "langflow",
        "langfuse",
        "langgraph",
        "laya",
        "lemonade",
        "libertai",
        "litellm_agent",
        "litellm_proxy",
        "llamafile",
        "lm_studio",
        "manus",
        "maritalk",
        "meta",
        "meta_llama",
        "microsoft_365_copilot",
        "milvus",
        "minimax",
        "mistral",
        "modelscope",
        "mongodb",
        "moonshot",
        "morph",
        "nace",
        "nadir",
        "nano-gpt",
        "nebius",
        "neosantara",
        "nlp_cloud",
        "novita",
        "nscale",
        "nvidia_nim",
        "nvidia_riva",
        "oci",
        "ollama",
        "ollama_chat",
        "oobabooga",
        "openai",
        "openai_like",
        "opencode_go",
        "openinfer",
        "openrouter",
        "opensearch",
        "ovhcloud",
        "parallel_ai",
        "parasail",
        "perplexity",
        "petals",
        "pg_vector",
        "pinstripes",
        "poe",
        "predibase",
        "prism",
        "publicai",
        "qwen_ai_platform",
        "qwencloud",
        "ragflow",
        "recraft",
        "reducto",
        "refuseless",
        "reka",
        "replicate",
        "runwayml",
        "s3_vectors",
        "sagemaker",
        "sagemaker_chat",
        "sagemaker_nova",
        "sail",
        "sambanova",
        "sap",
        "scaledown",
        "scaleway",
        "scx-ai",
        "snowflake",
        "soniox",
        "stability",
        "strands_decider",
        "streamlake",
        "synthetic",
        "tencent",
        "tensormesh",
        "text-completion-codestral",
        "text-completion-inception",
        "text-completion-openai",
        "together_ai",
        "topaz",
        "transcribe",
        "triton",
        "typesafe",
        "v0",
        "valkey",
        "vercel_ai_gateway",
        "vertex_ai",
        "vertex_ai_beta",
        "vllm",
        "volcengine",
        "voyage",
        "wally",
        "wandb",
        "watsonx",
        "watsonx_text",
        "xai",
        "xiaomi_mimo",
        "xinference",
        "zai",
        "zerogpu",
    }
)

PROVIDERS = OWN | LITELLM


def provider_of(name: str) -> str | None:
    """The provider a model name starts with (None: a bare name, which litellm looks up in its model table)."""
    return name.split("/", 1)[0] if "/" in name else None


# The model table litellm ships in its package (prices and context windows, by model name), which it reads to
# tell a bare name's provider: read here as the file it is, since importing litellm takes about a second.
MODEL_TABLE = "model_prices_and_context_window_backup.json"


@functools.cache
def litellm_models() -> frozenset[str] | None:
    """The model names litellm's table knows; None when litellm is not installed or its table cannot be read."""
    found = importlib.util.find_spec("litellm")  # a top-level package's spec: found without importing it
    for folder in (found and found.submodule_search_locations) or ():
        try:
            table = json.loads((Path(folder) / MODEL_TABLE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(table, dict):
            return frozenset(str(name) for name in table if name != "sample_spec")
    return None


def no_provider(name: str) -> tuple[str, str] | None:
    """Why no call to a model name could be sent, and what to write instead: a bare name (no `provider/`) litellm's
    table does not know, which litellm refuses before any request ("LLM Provider NOT provided"). None when the
    name has a provider, is known, or litellm's table cannot be read."""
    known = litellm_models()
    if provider_of(name) is not None or known is None or name in known:
        return None
    return (
        f"model name '{name}' names no provider, and litellm knows no model of that name",
        suggestion(name, sorted(n for n in known if "/" not in n))
        or f"name its provider: openai/{name} for an OpenAI-compatible server (with api_base), anthropic/..., ...",
    )
