"""An evaluation's record folder made before its calls: a batch evaluation (models/batch.py) keeps the ids of
its batches there (`batch.json`) the moment each is created, so a run killed while it waits is found again
(`sbpc eval --batch --resume`) and its batches with it, never sent twice.

Until the evaluation ends, the folder's run.json is an unfinished eval with no samples; the end writes the
whole record into the same folder (`RunRecord.of_evaluation(folder=...)`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from ..errors import Option
from .record import Record, RecordError, ResumeError, RunRecord, RunSettings, _check_folder, _new_folder, _public

JOURNAL = "batch.json"  # beside run.json: the batches the evaluation created (models/batch.Journal)


def begin(runs_dir: Path, settings: RunSettings, prompts: Mapping[str, str], scored: Mapping[str, object]) -> Path:
    """A new folder holding an unfinished evaluation's record: what it will score, and nothing scored yet."""
    record = Record(
        settings,
        dict(prompts),
        kind="eval",
        evaluation={**_public(dict(scored)), "samples": []},
    )
    kept = RunRecord(_new_folder(runs_dir, settings.file), record)
    kept.save()
    return kept.folder


def resumed(runs_dir: Path, settings: RunSettings, scored: Mapping[str, object]) -> Path:
    """The folder of the newest unfinished batch evaluation of this file that was asked exactly the same (its
    settings, split, metric and limit); ResumeError when there is none, or the newest was asked otherwise."""
    _check_folder(runs_dir)
    for folder in sorted(runs_dir.glob("*"), reverse=True):
        if not _journal_in(folder):
            continue
        try:
            record = RunRecord.load(folder)
        except RecordError:
            continue
        data = record.data
        if data.kind != "eval" or data.finished or data.settings.file != settings.file:
            continue
        asked = {**data.settings.recorded(), **{k: (data.evaluation or {}).get(k) for k in scored}}
        wanted = {**settings.recorded(), **_public(dict(scored))}
        differ = [k for k in wanted if asked.get(k) != wanted[k]]
        if differ:
            raise ResumeError(f"the evaluation in {folder} was started with other settings ({', '.join(differ)})")
        return folder
    raise ResumeError(
        f"no unfinished batch evaluation of {settings.file} in {runs_dir}; start one without ",
        Option("resume=True", "--resume"),
    )


def _journal_in(folder: Path) -> bool:
    """Whether `folder` holds a readable journal of batches (a torn or foreign one is no run to resume)."""
    try:
        kept = json.loads((folder / JOURNAL).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(kept, dict) and isinstance(kept.get("batches"), list)
