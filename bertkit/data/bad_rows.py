"""Collecting bad rows of a data file: stop with counts and line numbers, or write them to a rejects file.

Reading goes through the whole file before failing, so one run reports every problem (by kind, with the
first lines of each) instead of one per attempt. With `skip_bad_rows` the rows go to a JSONL rejects file
(`{"line", "reason", "row"}`) and reading continues.
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from bertkit.data.text import iter_lines
from bertkit.errors import InputFileError

_LINES_SHOWN = 3


class BadRow(NamedTuple):
    line: int | str  # a line number, or another locator (a SQuAD question id) where lines mean little
    kind: str        # short category used for counting, e.g. "unknown label"
    detail: str      # what exactly is wrong with this row
    row: str         # the raw row (or a short description of it)


@dataclass
class BadRowLog:
    path: Path
    skip_bad_rows: bool = False
    rejects_path: Path | None = None
    unit: str = "line"   # what BadRow.line holds, for messages
    skip_hint: bool = False   # the caller offers --skip-bad-rows (finetune, baseline): suggest it
    rows: list[BadRow] = field(default_factory=list)

    def add(self, line: int | str, kind: str, detail: str, row: str = "") -> None:
        self.rows.append(BadRow(line, kind, detail, row))

    def summary(self) -> str:
        counts = Counter(row.kind for row in self.rows)
        parts = []
        for kind, count in counts.most_common():
            lines = [row.line for row in self.rows if row.kind == kind][:_LINES_SHOWN]
            first = next(row for row in self.rows if row.kind == kind)
            shown = ", ".join(str(n) for n in lines) + (", ..." if count > len(lines) else "")
            parts.append(f"{count} x {kind} ({self.unit} {shown}; e.g. {first.detail})")
        return f"{len(self.rows)} bad row(s): " + "; ".join(parts)

    def finish(self) -> int:
        """Raise with the summary, or (skip_bad_rows) write the rejects file; returns the number rejected."""
        if not self.rows:
            return 0
        if not self.skip_bad_rows:
            hint = (" or pass --skip-bad-rows to write such rows to a rejects file and go on"
                    if self.skip_hint else "")
            raise InputFileError(self.path, f"{self.summary()}; fix the file{hint}",
                                 self.rows[0].line if self.unit == "line" else None)
        target = self.rejects_path or self.path.with_name(self.path.name + ".rejects.jsonl")
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", encoding="utf-8") as out:
            for row in self.rows:
                out.write(json.dumps({"file": str(self.path), self.unit.replace(" ", "_"): row.line, "reason": row.detail,
                                      "row": row.row}, ensure_ascii=False) + "\n")
        print(f"bertkit: {self.path}: skipped {self.summary()}; rejects written to {target}", file=sys.stderr)
        return len(self.rows)


def jsonl_objects(path: Path, encoding: str, log: BadRowLog):
    """(line number, JSON object, raw line) for each non-blank line; invalid JSON and non-object lines are
    logged as bad rows and skipped."""
    for line_no, line in iter_lines(path, encoding):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            log.add(line_no, "invalid JSON", f"invalid JSON: {err.msg} (column {err.colno})", line)
            continue
        if not isinstance(row, dict):
            log.add(line_no, "not a JSON object", f"expected a JSON object, got {type(row).__name__}", line)
            continue
        yield line_no, row, line
