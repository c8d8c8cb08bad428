"""Run records: what a run was asked to do and what it did, one folder per run.

`run.json` holds the settings, scores and every candidate with its fate; it is
rewritten atomically after every iteration, so a killed run keeps what it had
and `--resume` can continue it. No secrets: credentials inside URLs are masked.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..language.diagnostics import Option, OptionError, option
from ..language.method import Method
from ..language.writeback import atomic_write


@dataclass(frozen=True)
class RunSettings:
    """What a run was asked to do; a resumed run must be asked the same."""

    file: str
    data: str  # a data set's name or path, or "examples" for examples given in Python
    method: Method  # the sizes are those of the splits drawn
    models: Mapping[str, str]  # role -> model name
    test_data: str | None = None  # a separate test file (--test-data)

    def recorded(self) -> dict:
        """As written in run.json, one flat object: plain JSON, credentials inside URLs masked."""
        method = {name: list(value) if name == "only" else value for name, value in asdict(self.method).items()}
        flat = {
            "file": self.file,
            "data": self.data,
            **method,
            "models": dict(self.models),
            "test_data": self.test_data,
        }
        return json.loads(json.dumps(_public(flat)))


class RecordError(OptionError, ValueError):
    """A run record that cannot be written or read, explained for the user."""


class ResumeError(RecordError):
    """resume=True (--resume) found nothing it may continue."""


class RunRecord:
    """A folder per run holding run.json: settings, scores and every candidate with its fate. No secrets.

    It also keeps the sha256 of the text the run last left in the source file, so `--resume` can tell a
    user's edit (which it must not overwrite) from its own writes.
    """

    def __init__(self, folder: Path, data: dict):
        self.folder, self.data = folder, data

    @classmethod
    def create(cls, runs_dir: Path, settings: RunSettings, initial: Mapping[str, str], source: str = "") -> RunRecord:
        """A new record; `source` is the text of the file the run starts from."""
        _check_folder(runs_dir)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = runs_dir / f"{stamp}-{Path(settings.file).stem}"
        n = 1
        while folder.exists():
            n += 1
            folder = runs_dir / f"{stamp}-{Path(settings.file).stem}-{n}"
        try:
            folder.mkdir(parents=True)
        except OSError as exc:
            raise RecordError(f"cannot create the run record folder {folder}: {exc.strerror or exc}") from None
        record = cls(
            folder,
            {
                "settings": settings.recorded(),
                "initial_prompts": dict(initial),
                "initial_score": None,
                "iterations": [],
                "finished": False,
                "source_sha256": [_sha256(source)],
            },
        )
        record.save()
        return record

    @classmethod
    def load(cls, folder: Path) -> RunRecord:
        """The record kept in `folder`; RecordError (a ValueError) when there is none or it is not one."""
        return cls(folder, _read(folder / "run.json"))

    @classmethod
    def resume(cls, runs_dir: Path, settings: RunSettings, source: str) -> RunRecord:
        """The newest unfinished run of this file, which must have been asked exactly the same, and must
        find the file as it left it. Unreadable records are skipped (and named if nothing is found)."""
        _check_folder(runs_dir)
        skipped = []
        for folder in sorted(runs_dir.glob("*"), reverse=True):
            if not folder.is_dir():
                continue
            try:
                data = _read(folder / "run.json", resumable=True)
            except RecordError as exc:
                skipped.append(str(exc))
                continue
            if data["settings"]["file"] != settings.file or data["finished"]:
                continue
            wanted = settings.recorded()
            differ = [k for k in wanted if data["settings"].get(k) != wanted[k]]
            if differ:
                raise ResumeError(f"the run in {folder} was started with other settings ({', '.join(differ)})")
            if _sha256(source) not in data.get("source_sha256", [_sha256(source)]):
                raise ResumeError(
                    f"{settings.file} was changed since the run in {folder} last wrote it; resuming would undo "
                    "that change. To optimize the file as it is now, start a new run (without ",
                    Option("resume=True", "--resume"),
                    "); to continue the old run, first undo the change (for example with git checkout or git stash)",
                )
            return cls(folder, data)
        note = "".join(f"\n  skipped {reason}" for reason in skipped)
        raise ResumeError(f"no unfinished run of {settings.file} in {runs_dir}{note}")

    def expect_source(self, *texts: str) -> None:
        """The source file now holds one of these texts (the old one until a write is done, then the new one)."""
        self.data["source_sha256"] = [_sha256(text) for text in texts]
        self.save()

    def save(self) -> None:
        atomic_write(self.folder / "run.json", json.dumps(self.data, indent=2, ensure_ascii=False))


def _check_folder(runs_dir: Path) -> None:
    if runs_dir.exists() and not runs_dir.is_dir():
        raise RecordError(option("runs_dir", runs_dir), " is a file, not a folder; give a folder for run records")


NUMBER, MAYBE_TEXT = (int, float), (str, type(None))
# What the readers (runs, show, apply, report, compare, --resume) take from each part of a record: the types
# of the keys they use, and the keys they cannot do without. Scores are not checked: they are shown as they are.
SHAPES: dict[str, tuple[dict[str, type | tuple[type, ...]], tuple[str, ...]]] = {
    "record": (
        {
            "settings": dict,
            "initial_prompts": dict,
            "iterations": list,
            "finished": bool,
            "stopped": MAYBE_TEXT,
            "ledger": dict,
            "test": (dict, type(None)),
        },
        ("settings",),
    ),
    "settings": ({"file": str, "data": MAYBE_TEXT, "iterations": int, "models": dict, "only": list}, ("file",)),
    "ledger": ({"calls": int, "tokens": int, "cost": NUMBER}, ("calls", "tokens", "cost")),
    "test": ({}, ("initial", "final")),
    "iteration": (
        {
            "index": int,
            "prompts": dict,
            "candidates": list,
            "gradients": list,
            "gate": (dict, type(None)),
            "accepted": bool,
            "lost": int,
            "note": str,
            "calls": int,
            "tokens": int,
            "cost": NUMBER,
        },
        ("index", "prompts"),
    ),
    "candidate": ({"param": str, "fate": str, "new": MAYBE_TEXT, "reply": MAYBE_TEXT}, ("param", "fate")),
    "gradient": ({"nodes": dict}, ("sample", "expected")),
    "gate": (
        {"wins": list, "losses": list, "samples": int, "decided_after": int, "of": int},
        ("wins", "losses", "p", "alpha"),
    ),
}
PARTS: dict[str, dict[str, str | list[str]]] = {
    "record": {"settings": "settings", "ledger": "ledger", "test": "test", "iterations": ["iteration"]},
    "iteration": {"candidates": ["candidate"], "gradients": ["gradient"], "gate": "gate"},
}
PROMPTS = {"record": "initial_prompts", "iteration": "prompts"}  # param -> text
RESUMED = ("initial_prompts", "iterations", "finished")  # besides the settings every record has


def _read(path: Path, resumable: bool = False) -> dict:
    """A run record, checked enough that reading it cannot fail on its shape (SHAPES). `resumable`: it must
    also hold every part that resuming needs (a record cut short before those were written is shown, not resumed)."""
    if path.exists() and not path.is_file():  # a FIFO would block the reader forever
        raise RecordError(f"{path}: not a run record (not a regular file)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise RecordError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:  # also bad UTF-8
        raise RecordError(f"{path}: not a run record (invalid JSON: {exc})") from None
    except RecursionError:
        raise RecordError(f"{path}: not a run record (it nests too deeply)") from None
    problem = _misshapen(data, "record", "")
    if problem is None and resumable:
        missing = [k for k in RESUMED if k not in data]
        problem = f"the record has no {', '.join(missing)}" if missing else None
    if problem:
        raise RecordError(f"{path}: not a run record ({problem})")
    return data


def _misshapen(value, part: str, where: str) -> str | None:
    """The first place where `value` is not what readers take for `part`, e.g. "iterations[2] has no 'prompts'"."""

    def at(key: str) -> str:
        return f"{where}.{key}" if where else key

    if not isinstance(value, dict):
        return f"{where or 'the record'} is {_kind(value)}, not an object"
    types, required = SHAPES[part]
    missing = [key for key in required if key not in value]
    if missing:
        return f"{where or 'the record'} has no '{missing[0]}'"
    for key, kinds in types.items():
        if key in value and (
            not isinstance(value[key], kinds) or (kinds in (int, NUMBER) and isinstance(value[key], bool))
        ):
            return f"{at(key)} is {_kind(value[key])}"
    prompts: dict = value.get(PROMPTS.get(part), {})
    bad = next((name for name, text in prompts.items() if not isinstance(text, str)), None)
    if bad is not None:
        return f"{at(PROMPTS[part])}.{bad} is {_kind(prompts[bad])}, not text"
    for key, child in PARTS.get(part, {}).items():
        if not isinstance(value.get(key), (dict, list)):
            continue
        items = (
            [(f"{key}[{i}]", item) for i, item in enumerate(value[key])]
            if isinstance(child, list)
            else [(key, value[key])]
        )
        for name, item in items:
            problem = _misshapen(item, child[0] if isinstance(child, list) else child, at(name))
            if problem:
                return problem
    return None


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "text", bool: "true/false", type(None): "null"}.get(
        type(value), "a number"
    )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def resume_command(argv: Sequence[str]) -> str:
    """The command that continues a run: the one that was given, shell-quoted, with --resume
    (credentials inside URLs masked: a password given in --api-base is never printed back)."""
    words = _public(["sbpc", *argv])
    return shlex.join(words if "--resume" in words else [*words, "--resume"])


def _public(value):
    """Settings as recorded: credentials inside URLs (user:password@host) are masked."""
    if isinstance(value, dict):
        return {k: _public(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_public(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"://[^/@\s]+@", "://***@", value)
    return value
