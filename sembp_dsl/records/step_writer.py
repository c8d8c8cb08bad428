"""The write-back of an optimize run, wired in one place: the optimizer hands each accepted step's graph to a
StepWriter, which writes its prompts through language/tooling/writeback.py (over the source file, to another file, or
nowhere on a dry run) and tells the run record, before and after each write, which texts the source file may
hold, so that a resumed run can tell its own writes from a user's edit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..language.graph.graph import Graph
from ..language.tooling.writeback import WriteBack
from .record import RunRecord


@dataclass(frozen=True)
class StepWriter:
    """Called with each step the gate accepted; `log` hears where the file had to go instead, if it did."""

    writer: WriteBack
    record: RunRecord
    log: Callable[[str], None]

    def __post_init__(self) -> None:
        self.writer.report_to(self.record.expect_source)

    def __call__(self, graph: Graph) -> None:
        notice = self.writer(graph.prompts)
        if notice:
            self.log(notice)
