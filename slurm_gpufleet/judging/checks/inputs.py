"""Input values a reader could not take as they are (a null where an object belongs, a number out of range):
each is a warning naming where it is.  The reader took the rest, so every other check still judges the
node: no one bad value blinds a node's health check."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..findings import Finding

if TYPE_CHECKING:
    from . import Context

NAME = "input"
ORDER = 5
SHOWN = 5  # notes named one by one; the rest counted in one more


def check(ctx: Context) -> list[Finding]:
    notes = ctx.snapshot.input_notes
    out = [Finding(NAME, "warn", "watch", None, f"input value not read as given: {note.split(':')[0][-50:]}", note)
           for note in notes[:SHOWN]]
    if len(notes) > SHOWN:
        out.append(Finding(NAME, "warn", "watch", None, f"{len(notes) - SHOWN} more input value(s) not read as given",
                           "; ".join(notes[SHOWN:SHOWN + 5])))
    return out
