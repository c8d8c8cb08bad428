"""A diagnostic code: its stable name and what `sbpc explain CODE` prints."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    code: str
    title: str  # what went wrong, in a few words: the list `sbpc explain` prints
    explanation: str
    example: str  # a file (or command) that gets this diagnostic
    fix: str  # the same, fixed (or what to do)

    @property
    def severity(self) -> str:
        return "warning" if self.code.startswith("W") else "error"

    def render(self) -> str:
        """The page `sbpc explain CODE` prints."""
        indent = "\n".join("    " + line if line else "" for line in self.example.split("\n"))
        fixed = "\n".join("    " + line if line else "" for line in self.fix.split("\n"))
        return (
            f"{self.code}: {self.title} ({self.severity})\n\n{self.explanation}\n\n"
            f"For example:\n\n{indent}\n\nFix:\n\n{fixed}\n"
        )
