"""docs/patches-<release>.md: what each patch of a release does and why, written from the release's
series.yaml (the one source of a patch's words) by `rocmpatch lock`, checked by `lock --check` and
by a CI test.

Each patch has one block on the page, between two comment lines:

    <!-- patch softmax: written by `rocmpatch lock` from series.yaml; edit series.yaml, not this block -->
    ### 0001 softmax
    ...
    <!-- end of patch softmax -->

`lock` rewrites what is inside each block and keeps everything outside byte for byte: the page's
own prose (how the series is tested, sections grouping patches, how each patch was tested), and the
place of each block. A patch without a block gets one before the block of the next patch in the
series (at the end of the page when none follows); a block whose patch left the series is dropped,
and so is a second block of one patch.
The page is written only where it exists (a source checkout's docs/, beside patchsets/).
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

from rocmpatch.files import MAX_TEXT_FILE, read_regular_file, replace_file
from rocmpatch.schema import Series, SeriesEntry

START = "<!-- patch {name}: written by `rocmpatch lock` from series.yaml; edit series.yaml, not this block -->"
END = "<!-- end of patch {name} -->"
_BLOCK = re.compile(r"^<!-- patch (?P<name>[^:\s]+): written by [^\n]*-->\n.*?^<!-- end of patch (?P=name) -->\n", re.S | re.M)
_CODE_SPAN = re.compile(r"(`[^`]*`)")
_NUMBER = re.compile(r"^(\d+)-")


def page_path(patchsets_root: Path, release: str) -> Path:
    """Where a release's page lives: docs/ beside patchsets/."""
    return patchsets_root.parent / "docs" / f"patches-{release}.md"


def render(series: Series, page: str) -> str:
    """`page` with every patch's block written from `series` (see the module's docstring)."""
    entries = {entry.name: entry for entry in series.entries}
    release = series.directory.name
    parts: list[str] = []  # the page's own text and the blocks, in order
    names: list[str | None] = []  # the patch of each part; None for the page's own text
    position = 0
    for found in _BLOCK.finditer(page):
        parts.append(page[position:found.start()])
        names.append(None)
        name = found.group("name")
        if name in entries and name not in names:  # a second block of one patch goes too
            parts.append(block(entries[name], release))
            names.append(name)
        position = found.end()
    parts.append(page[position:])
    names.append(None)
    order = [entry.name for entry in series.entries]
    for index, name in enumerate(order):
        if name in names:
            continue
        later = next((names.index(n) for n in order[index + 1:] if n in names), None)
        if later is None:  # at the end, after one blank line
            tail = parts[-1]
            parts[-1] = tail.rstrip("\n") + "\n\n" if tail.strip() else ("\n" if len(parts) > 1 else "")
            parts.append(block(entries[name], release))
            names.append(name)
            parts.append("")
            names.append(None)
        else:
            parts.insert(later, block(entries[name], release) + "\n")
            names.insert(later, name)
    return "".join(parts)


def refresh(path: Path, series: Series, *, write: bool) -> int | None:
    """The first line (1-based) where the page at `path` differs from what `series` gives, written
    when `write`; None when it is current or there is no page."""
    if not path.is_file():
        return None
    page = read_regular_file(path, limit=MAX_TEXT_FILE, what="docs page").decode("utf-8", "surrogateescape")
    rendered = render(series, page)
    if rendered == page:
        return None
    if write:
        replace_file(path, rendered.encode("utf-8", "surrogateescape"), mode=stat.S_IMODE(path.stat().st_mode))
    ours, theirs = page.splitlines(), rendered.splitlines()
    return next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs))) + 1


def block(entry: SeriesEntry, release: str) -> str:
    """One patch's block: heading, summary, why, what it changes, its file and provenance."""
    number = _NUMBER.match(entry.file)
    heading = f"### {number.group(1)} {entry.name}" if number else f"### {entry.name}"
    link = f"../patchsets/{release}/{entry.file}"
    lines = [
        START.format(name=entry.name),
        heading,
        "",
        _markdown(entry.summary) + ".",
        "",
        "**Why.** " + _markdown(entry.why),
        "",
        "**What it changes.** " + _markdown(entry.description),
        "",
        f"[`{entry.file}`]({link}), last update {entry.last_update}; origin: {_markdown(entry.origin)}; "
        f"forwarded upstream: {_markdown(entry.forwarded)}.",
        END.format(name=entry.name),
    ]
    return "\n".join(lines) + "\n"


def _markdown(text: str) -> str:
    """series.yaml's plain text as Markdown that shows it as written: code spans (`...`) kept,
    elsewhere what Markdown would take for emphasis, HTML or a line's list/heading/quote mark is
    escaped with a backslash."""
    pieces = _CODE_SPAN.split(text)
    for index in range(0, len(pieces), 2):  # the even pieces are outside code spans
        piece = re.sub(r"<(?=[A-Za-z/!?])", r"\<", pieces[index])  # what could open an HTML tag
        # `*` and `_` can open or close emphasis unless spaces (or, for `_`, letters) surround them
        piece = re.sub(r"(?<!\s)\*|\*(?!\s)", r"\*", piece)
        pieces[index] = re.sub(r"(?<![A-Za-z0-9\s])_|_(?![A-Za-z0-9\s])|(?<=\s)_(?=[A-Za-z0-9])|(?<=[A-Za-z0-9])_(?=\s)", r"\_", piece)
    escaped = "".join(pieces)
    return "\n".join(_line_start(line) for line in escaped.split("\n"))


def _line_start(line: str) -> str:
    """A line that Markdown would start a list, heading or quote with, escaped."""
    if re.match(r"[#>]|[-+](\s|$)|\d+[.)](\s|$)", line):
        found = re.match(r"\d+", line)
        cut = found.end() if found else 0
        return line[:cut] + "\\" + line[cut:]
    return line
