"""Run records: what a run was asked to do and what it did, one folder per run.

`run.json` holds the settings, scores and every candidate with its fate; it is
rewritten atomically after every iteration, so a killed run keeps what it had
and `--resume` can continue it. No secrets: credentials inside URLs are masked.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

from .writeback import atomic_write


@dataclass(frozen=True)
class Settings:
    """What a run was asked to do; a resumed run must be asked the same."""

    file: str
    data: str
    seed: int
    iterations: int
    train_size: int
    val_size: int
    test_size: int
    errors_per_gradient: int
    gradient: str  # sibling | no_sibling | none
    update: str  # full | sample
    gate: str  # validation | train | none
    only: tuple[str, ...]
    models: Mapping[str, str]
    gate_alpha: float = 0.1  # a step passes the gate when a one-sided sign test on its wins and losses gives p <= this

    def recorded(self) -> dict:
        """As written in run.json: plain JSON, credentials inside URLs masked."""
        return json.loads(json.dumps(_public(asdict(self))))


class ResumeError(Exception):
    """--resume found nothing it may continue."""


class RunRecord:
    """A folder per run holding run.json: settings, scores and every candidate with its fate. No secrets."""

    def __init__(self, folder: Path, data: dict):
        self.folder, self.data = folder, data

    @classmethod
    def create(cls, runs_dir: Path, settings: Settings, initial: Mapping[str, str]) -> "RunRecord":
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = runs_dir / f"{stamp}-{Path(settings.file).stem}"
        n = 1
        while folder.exists():
            n += 1
            folder = runs_dir / f"{stamp}-{Path(settings.file).stem}-{n}"
        folder.mkdir(parents=True)
        record = cls(folder, {"settings": settings.recorded(), "initial_prompts": dict(initial),
                              "initial_score": None, "iterations": [], "finished": False})
        record.save()
        return record

    @classmethod
    def load(cls, folder: Path) -> "RunRecord":
        """The record kept in `folder`; OSError or ValueError when there is none or it is not JSON."""
        return cls(folder, json.loads((folder / "run.json").read_text(encoding="utf-8")))

    @classmethod
    def resume(cls, runs_dir: Path, settings: Settings) -> "RunRecord":
        """The newest unfinished run of this file, which must have been asked exactly the same."""
        for folder in sorted(runs_dir.glob("*"), reverse=True):
            try:
                data = json.loads((folder / "run.json").read_text())
            except (OSError, ValueError):
                continue
            if data["settings"]["file"] != settings.file or data["finished"]:
                continue
            wanted = settings.recorded()
            differ = [k for k in wanted if data["settings"].get(k) != wanted[k]]
            if differ:
                raise ResumeError(f"the run in {folder} was started with other settings ({', '.join(differ)})")
            return cls(folder, data)
        raise ResumeError(f"no unfinished run of {settings.file} in {runs_dir}")

    def save(self) -> None:
        atomic_write(self.folder / "run.json", json.dumps(self.data, indent=2, ensure_ascii=False))


def _public(value):
    """Settings as recorded: credentials inside URLs (user:password@host) are masked."""
    if isinstance(value, dict):
        return {k: _public(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_public(v) for v in value]
    if isinstance(value, str):
        return re.sub(r"://[^/@\s]+@", "://***@", value)
    return value
