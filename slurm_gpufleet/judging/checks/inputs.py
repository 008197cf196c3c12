"""Input values a reader could not take as they are (a null where an object belongs, a number out of range):
each is a warning naming where it is.  The reader took the rest, so every other check still judges the
node: no one bad value blinds a node's health check.  A GPU's fault field (an error counter, a pending
remap) that reads neither a count, a yes/no nor a word nvidia-smi prints is a warning on that GPU naming the
field: the GPU was judged in part, never judged healthy in silence and never drained for a value alone."""

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
    for g in ctx.snapshot.gpus:
        if g.unread and not g.lost:
            fields = ", ".join(note.split(" = ")[0] for note in g.unread[:3])
            more = f" (+{len(g.unread) - 3} more)" if len(g.unread) > 3 else ""
            out.append(Finding(NAME, "warn", "watch", g.index, f"fault field not read as given: {fields}{more}",
                               "; ".join(g.unread[:5]) + ": this GPU is judged in part"))
    return out
