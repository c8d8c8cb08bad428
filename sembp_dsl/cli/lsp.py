"""`sbpc lsp`: a Language Server Protocol server on standard input and output, over language/tooling/editor.py.

It gives diagnostics as you type (exactly those of `sbpc check`, with their codes), hover, definition,
references, rename, completion, the outline and formatting (`sbpc fmt`). Each version of a file is
read once; every request answers from that reading. Nothing here imports the model runtime, and no
file, however broken or hostile, stops the server: a request that fails is logged and answered empty.
The protocol library, pygls, is an extra: `pip install 'sbpc[lsp]'`.
"""

from __future__ import annotations

import bisect
import inspect
import logging
import re
import sys
from collections.abc import Callable
from functools import wraps
from typing import TypeVar

from .. import __version__
from ..language.diagnostics import Diagnostic
from ..language.tooling.editor import Document, Occurrence, RenameError, Symbol
from .reading import Reader
from .routers import router_problem

T = TypeVar("T")
log = logging.getLogger("sbpc.lsp")
LINE_BREAK = re.compile(r"\r\n|\r|\n")  # what LSP counts as line ends, no more (not \x85 nor \u2028)


class Lines:
    """Offsets <-> LSP positions of one text, in the units the client and server agreed on."""

    def __init__(self, text: str, encoding: str):
        self.text = text
        self.starts = [0] + [m.end() for m in LINE_BREAK.finditer(text)]
        self.encoding = encoding

    def units(self, text: str) -> int:
        if self.encoding == "utf-8":
            return len(text.encode("utf-8", "surrogatepass"))
        if self.encoding == "utf-32":
            return len(text)
        return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)

    def position(self, offset: int):
        from lsprotocol import types  # the lsp extra: only `sbpc lsp` has it for sure

        offset = max(0, min(offset, len(self.text)))
        line = bisect.bisect_right(self.starts, offset) - 1
        return types.Position(line, self.units(self.text[self.starts[line] : offset]))

    def range(self, start: int, end: int):
        from lsprotocol import types  # the lsp extra: only `sbpc lsp` has it for sure

        return types.Range(self.position(start), self.position(end))

    def offset(self, position) -> int:
        if position.line >= len(self.starts):
            return len(self.text)
        start = self.starts[position.line]
        end = self.starts[position.line + 1] if position.line + 1 < len(self.starts) else len(self.text)
        line = LINE_BREAK.sub("", self.text[start:end])
        units = 0
        for index, char in enumerate(line):
            if units >= position.character:
                return start + index
            units += self.units(char)
        return start + len(line)


def quietly(default: Callable[[], T]):
    """A handler that logs what goes wrong and answers `default()`: no file may take the server down."""

    def failed(handler, exc: Exception) -> T:
        if type(exc).__name__.startswith("JsonRpc"):
            raise exc  # an answer for the client, such as a rename refused
        log.exception("sbpc lsp: %s failed", handler.__name__)
        return default()

    def wrap(handler):
        if inspect.iscoroutinefunction(handler):

            @wraps(handler)
            async def guarded_async(*args, **kwargs):
                try:
                    return await handler(*args, **kwargs)
                except Exception as exc:
                    return failed(handler, exc)

            return guarded_async

        @wraps(handler)
        def guarded(*args, **kwargs):
            try:
                return handler(*args, **kwargs)
            except Exception as exc:
                return failed(handler, exc)

        return guarded

    return wrap


REQUEST_FAILED = -32803  # LSP's code for a request the server understood and refuses, such as a rename


def refusals_unlogged(record: logging.LogRecord) -> bool:
    """pygls logs every error answer with a traceback; a refused rename is an answer, not a failure."""
    error = record.exc_info[1] if record.exc_info else None
    return getattr(error, "code", None) != REQUEST_FAILED


class OpenFiles:
    """The files the editor has open, each version read once into a Document, and where things are in them."""

    def __init__(self, server) -> None:
        self.server = server
        self.documents: dict[str, tuple[Document, Lines]] = {}  # the last reading of each: requests ask it
        self.reader: Reader[Document] = Reader(read_document)  # off the request loop, a stale one dropped

    def path_of(self, uri: str, language: str | None = None) -> str:
        from pygls.uris import to_fs_path  # the lsp extra: only `sbpc lsp` has it for sure

        path = to_fs_path(uri) or uri
        if not path.endswith((".sbp", ".yaml", ".yml")) and language != "yaml":
            path += ".sbp"  # an unsaved buffer, or a file named otherwise that the editor calls sbp
        return path

    async def analyse(self, uri: str, text: str, version: int | None, language: str | None = None) -> None:
        """Read this version in the worker thread, then publish its diagnostics; nothing when a newer version
        came meanwhile (its own reading publishes)."""
        from lsprotocol import types  # the lsp extra: only `sbpc lsp` has it for sure

        previous = self.documents.get(uri)
        path = previous[0].path if previous and language is None else self.path_of(uri, language)
        document = await self.reader(uri, text, path)
        if document is None:
            return
        lines = Lines(text, str(self.server.workspace.position_encoding or "utf-16"))
        self.documents[uri] = (document, lines)
        diagnostics = [lsp_diagnostic(uri, d, lines) for d in document.diagnostics]
        self.server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri, diagnostics, version))

    def at(self, uri: str, position) -> tuple[Document, Lines, int] | None:
        found = self.documents.get(uri)
        if found is None:
            return None
        document, lines = found
        return document, lines, lines.offset(position)

    def location(self, uri: str, lines: Lines, o: Occurrence):
        from lsprotocol import types  # the lsp extra: only `sbpc lsp` has it for sure

        return types.Location(uri, lines.range(o.start, o.end))


def lsp_diagnostic(uri: str, d: Diagnostic, lines: Lines):
    """A diagnostic of `sbpc check` in LSP's terms, its notes as related information."""
    from lsprotocol import types  # the lsp extra: only `sbpc lsp` has it for sure

    where = lines.range(d.span.start, d.span.end) if d.span else lines.range(0, 0)
    return types.Diagnostic(
        where,
        d.message + (f"\nhelp: {d.help}" if d.help else ""),
        severity=types.DiagnosticSeverity.Error if d.severity == "error" else types.DiagnosticSeverity.Warning,
        code=d.code or None,
        source="sbpc",
        related_information=[
            types.DiagnosticRelatedInformation(types.Location(uri, lines.range(n.span.start, n.span.end)), n.message)
            for n in d.notes
        ]
        or None,
    )


def read_document(text: str, path: str) -> Document:
    """One version of a file read, with every answer a request may ask for (in the worker thread)."""
    return Document(text, path, router_problem).answered()


def build_server():
    """The server, its features registered (pygls is imported here, by `sbpc lsp` alone)."""
    from lsprotocol import types  # the lsp extra: only `sbpc lsp` has it for sure
    from pygls.lsp.server import LanguageServer

    server = LanguageServer("sbpc", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Full)
    logging.getLogger("pygls.protocol.json_rpc").addFilter(refusals_unlogged)
    open_files = OpenFiles(server)
    for register in (register_sync, register_navigation, register_rename, register_completion, register_outline):
        register(server, open_files)
    return server


def register_sync(server, open_files: OpenFiles) -> None:
    """Open, change and close: each version analysed, its diagnostics published."""
    from lsprotocol import types  # the lsp extra: only `sbpc lsp` has it for sure

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    @quietly(lambda: None)
    async def did_open(ls, params: types.DidOpenTextDocumentParams) -> None:
        item = params.text_document
        await open_files.analyse(item.uri, item.text, item.version, item.language_id)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    @quietly(lambda: None)
    async def did_change(ls, params: types.DidChangeTextDocumentParams) -> None:
        if params.content_changes:  # full sync: each change is the whole text, so the last is the file
            text = params.content_changes[-1].text
            await open_files.analyse(params.text_document.uri, text, params.text_document.version)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    @quietly(lambda: None)
    def did_close(ls, params: types.DidCloseTextDocumentParams) -> None:
        open_files.documents.pop(params.text_document.uri, None)
        open_files.reader.forget(params.text_document.uri)
        server.text_document_publish_diagnostics(types.PublishDiagnosticsParams(params.text_document.uri, []))


def register_navigation(server, open_files: OpenFiles) -> None:
    """Hover, definition and references."""
    from lsprotocol import types  # the lsp extra: only `sbpc lsp` has it for sure

    @server.feature(types.TEXT_DOCUMENT_HOVER)
    @quietly(lambda: None)
    def hover(ls, params: types.HoverParams) -> types.Hover | None:
        found = open_files.at(params.text_document.uri, params.position)
        if found is None:
            return None
        document, lines, offset = found
        text = document.hover(offset)
        if text is None:
            return None
        occurrence = document.at(offset)
        where = lines.range(occurrence.start, occurrence.end) if occurrence else None
        return types.Hover(types.MarkupContent(types.MarkupKind.Markdown, text), where)

    @server.feature(types.TEXT_DOCUMENT_DEFINITION)
    @quietly(list)
    def definition(ls, params: types.DefinitionParams) -> list[types.Location]:
        found = open_files.at(params.text_document.uri, params.position)
        if found is None:
            return []
        document, lines, offset = found
        return [open_files.location(params.text_document.uri, lines, o) for o in document.definition(offset)]

    @server.feature(types.TEXT_DOCUMENT_REFERENCES)
    @quietly(list)
    def references(ls, params: types.ReferenceParams) -> list[types.Location]:
        found = open_files.at(params.text_document.uri, params.position)
        if found is None:
            return []
        document, lines, offset = found
        occurrences = document.references(offset, params.context.include_declaration)
        return [open_files.location(params.text_document.uri, lines, o) for o in occurrences]


def register_rename(server, open_files: OpenFiles) -> None:
    """Rename, refused with the reason (a JSON-RPC error the client shows) where it cannot be done."""
    from lsprotocol import types  # the lsp extra: only `sbpc lsp` has it for sure
    from pygls.exceptions import JsonRpcException

    @server.feature(types.TEXT_DOCUMENT_PREPARE_RENAME)
    @quietly(lambda: None)
    def prepare_rename(ls, params: types.PrepareRenameParams) -> types.Range | None:
        found = open_files.at(params.text_document.uri, params.position)
        if found is None:
            return None
        document, lines, offset = found
        try:
            occurrence = document.prepare_rename(offset)
        except RenameError as exc:
            raise JsonRpcException(str(exc), code=REQUEST_FAILED) from None  # the client shows why
        return lines.range(occurrence.start, occurrence.end)

    @server.feature(types.TEXT_DOCUMENT_RENAME)
    @quietly(lambda: None)
    def rename(ls, params: types.RenameParams) -> types.WorkspaceEdit | None:
        found = open_files.at(params.text_document.uri, params.position)
        if found is None:
            return None
        document, lines, offset = found
        try:
            occurrences = document.rename(offset, params.new_name)
        except RenameError as exc:
            raise JsonRpcException(str(exc), code=REQUEST_FAILED) from None
        edits = [types.TextEdit(lines.range(o.start, o.end), params.new_name) for o in occurrences]
        return types.WorkspaceEdit(changes={params.text_document.uri: edits})


def register_completion(server, open_files: OpenFiles) -> None:
    """Completion, each item with the kind of thing it names."""
    from lsprotocol import types  # the lsp extra: only `sbpc lsp` has it for sure

    kinds = {
        "keyword": types.CompletionItemKind.Keyword,
        "param": types.CompletionItemKind.Constant,
        "template": types.CompletionItemKind.Module,
        "function": types.CompletionItemKind.Method,
        "node": types.CompletionItemKind.Function,
        "input": types.CompletionItemKind.Variable,
        "setting": types.CompletionItemKind.Property,
        "value": types.CompletionItemKind.EnumMember,
        "type": types.CompletionItemKind.TypeParameter,
        "metric": types.CompletionItemKind.EnumMember,
        "model": types.CompletionItemKind.Class,
        "variable": types.CompletionItemKind.Variable,
    }

    @server.feature(types.TEXT_DOCUMENT_COMPLETION, types.CompletionOptions(trigger_characters=["{", "=", ">"]))
    @quietly(lambda: None)
    def completion(ls, params: types.CompletionParams) -> types.CompletionList | None:
        found = open_files.at(params.text_document.uri, params.position)
        if found is None:
            return None
        document, _, offset = found
        items = [
            types.CompletionItem(
                c.label, kind=kinds.get(c.kind), detail=c.detail or c.kind, insert_text=c.insert or None
            )
            for c in document.completions(offset)
        ]
        return types.CompletionList(is_incomplete=False, items=items)


def register_outline(server, open_files: OpenFiles) -> None:
    """The outline (document symbols) and formatting (`sbpc fmt`)."""
    from lsprotocol import types  # the lsp extra: only `sbpc lsp` has it for sure

    symbol_kinds = {
        "pipeline": types.SymbolKind.File,
        "input": types.SymbolKind.Variable,
        "param": types.SymbolKind.String,
        "template": types.SymbolKind.Module,
        "function": types.SymbolKind.Method,
        "node": types.SymbolKind.Function,
        "output": types.SymbolKind.Event,
        "metric": types.SymbolKind.Enum,
        "model": types.SymbolKind.Class,
        "optimize": types.SymbolKind.Object,
        "block": types.SymbolKind.Object,
        "setting": types.SymbolKind.Property,
    }

    def document_symbol(lines: Lines, s: Symbol) -> types.DocumentSymbol:
        return types.DocumentSymbol(
            name=s.name,
            kind=symbol_kinds.get(s.kind, types.SymbolKind.Object),
            range=lines.range(s.start, s.end),
            selection_range=lines.range(s.name_start, s.name_end),
            detail=s.detail or s.kind,
            children=[document_symbol(lines, child) for child in s.children] or None,
        )

    @server.feature(types.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    @quietly(list)
    def symbols(ls, params: types.DocumentSymbolParams) -> list[types.DocumentSymbol]:
        found = open_files.documents.get(params.text_document.uri)
        if found is None:
            return []
        document, lines = found
        return [document_symbol(lines, s) for s in document.outline]

    @server.feature(types.TEXT_DOCUMENT_FORMATTING)
    @quietly(list)
    def formatting(ls, params: types.DocumentFormattingParams) -> list[types.TextEdit]:
        found = open_files.documents.get(params.text_document.uri)
        if found is None:
            return []
        document, lines = found
        new = document.formatted
        if new is None or new == document.text:
            return []
        return [types.TextEdit(lines.range(0, len(document.text)), new)]


def serve() -> int:
    """`sbpc lsp`: serve on stdio until the client says exit."""
    try:
        server = build_server()
    except ImportError:
        print("sbpc: error: sbpc lsp needs pygls: pip install 'sbpc[lsp]'", file=sys.stderr)
        return 1
    server.start_io()
    return 0
