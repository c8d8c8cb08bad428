"""How fast `sbpc lsp` answers, per request, on the shipped pipelines (target: 50 ms).

A real LSP client (pygls') starts `sbpc lsp` over stdio and opens each shipped .sbp file. Each round edits
the file (one character in a prompt, then back, so every round is a new version to read) and times, from
the client's side: the diagnostics published after the edit, hover, go to definition, references,
completion, rename, the outline and formatting. The figures are the median and the slowest of --rounds
rounds, in milliseconds, round trip included.

    .venv/bin/python bench/lsp_speed.py --rounds 20
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parents[1]
TARGET_MS = 50


def place(text: str, offset: int) -> types.Position:
    return types.Position(text.count("\n", 0, offset), offset - (text.rfind("\n", 0, offset) + 1))


async def measure(rounds: int) -> dict[str, dict[str, list[float]]]:
    client = LanguageClient("bench", "1")
    published: dict[tuple[str, int], asyncio.Event] = {}

    @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
    def diagnostics(ls, params: types.PublishDiagnosticsParams) -> None:
        published.setdefault((params.uri, params.version or 0), asyncio.Event()).set()

    async def published_for(uri: str, version: int) -> None:
        await published.setdefault((uri, version), asyncio.Event()).wait()

    await client.start_io(sys.executable, "-m", "sembp_dsl.cli", "lsp")
    await client.initialize_async(
        types.InitializeParams(capabilities=types.ClientCapabilities(), process_id=None, root_uri=None)
    )
    client.initialized(types.InitializedParams())
    figures: dict[str, dict[str, list[float]]] = {}
    for path in sorted((ROOT / "pipelines").glob("*.sbp")):
        text, uri = path.read_text(), path.as_uri()
        doc = types.TextDocumentIdentifier(uri)
        client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(uri, "sbp", 1, text)))
        await published_for(uri, 1)
        param = text.index("param ") + len("param ")
        use = text.index("prompt = ") + len("prompt = ")
        node = text.index("node ") + len("node ")
        prompt = text.index('"', param) + 1
        timed: dict[str, list[float]] = {}

        async def time_it(name: str, request, timed: dict[str, list[float]] = timed) -> None:
            start = time.perf_counter()
            await request
            timed.setdefault(name, []).append((time.perf_counter() - start) * 1000)

        for version in range(2, rounds + 2):
            edited = text[:prompt] + ("x" if version % 2 else "") + text[prompt:]
            start = time.perf_counter()
            client.text_document_did_change(
                types.DidChangeTextDocumentParams(
                    types.VersionedTextDocumentIdentifier(version=version, uri=uri),
                    [types.TextDocumentContentChangeWholeDocument(edited)],
                )
            )
            await published_for(uri, version)
            timed.setdefault("diagnostics after an edit", []).append((time.perf_counter() - start) * 1000)
            await time_it("hover", client.text_document_hover_async(types.HoverParams(doc, place(edited, node))))
            await time_it(
                "definition", client.text_document_definition_async(types.DefinitionParams(doc, place(edited, use)))
            )
            context = types.ReferenceContext(include_declaration=True)
            await time_it(
                "references",
                client.text_document_references_async(types.ReferenceParams(context, doc, place(edited, node))),
            )
            await time_it(
                "completion", client.text_document_completion_async(types.CompletionParams(doc, place(edited, use)))
            )
            await time_it(
                "rename", client.text_document_rename_async(types.RenameParams(doc, place(edited, param), "renamed"))
            )
            await time_it("outline", client.text_document_document_symbol_async(types.DocumentSymbolParams(doc)))
            options = types.FormattingOptions(tab_size=2, insert_spaces=True)
            await time_it(
                "formatting", client.text_document_formatting_async(types.DocumentFormattingParams(doc, options))
            )
        figures[path.name] = timed
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    figures = asyncio.run(measure(args.rounds))
    requests = list(next(iter(figures.values())))
    print(f"sbpc lsp, {args.rounds} rounds per file: median / slowest, ms (target {TARGET_MS} ms)\n")
    print(f"| request | {' | '.join(figures)} |")
    print(f"|---|{'---|' * len(figures)}")
    worst = 0.0
    for request in requests:
        cells = []
        for timed in figures.values():
            times = timed[request]
            cells.append(f"{statistics.median(times):.1f} / {max(times):.1f}")
            worst = max(worst, statistics.median(times))
        print(f"| {request} | {' | '.join(cells)} |")
    print(f"\nslowest median: {worst:.1f} ms ({'within' if worst <= TARGET_MS else 'over'} the {TARGET_MS} ms target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
