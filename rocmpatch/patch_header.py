"""A patch file's header (the `git format-patch` mail above its diff), written from its series.yaml
entry. series.yaml is the one source of a patch's name, summary, description and why; the header
repeats them so that the file alone (for `git am`, for a reviewer) says what it does and why:

    From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001
    From: <author> <rocmpatch@invalid>        (the author's own address when it gives one)
    Date: <last-update>, at 00:00:00 +0000
    Subject: [PATCH] <name>: <summary>        (folded at 78 columns, as format-patch folds it)

    <description>

    Why: <why>
    ---
    <the diffstat and the diff: the file's own bytes, never rewritten>

`rocmpatch lock` writes it (`with_header`), `lock --check` reports the first field where a file's
header and its entry disagree (`difference`), and code that gets a header from elsewhere (a
rebase's `git format-patch`) reads it back with `read` / `entry_from_header`. `[PATCH]` carries no
"n/m" count, so adding a patch leaves the other files' bytes (and sha256s) alone. Text is written as
UTF-8 as it is (`git am` takes it so; format-patch would MIME-encode it).
"""

from __future__ import annotations

import dataclasses
import datetime
import email.utils
import re
from dataclasses import dataclass

from rocmpatch.errors import InvalidInput
from rocmpatch.schema import SeriesEntry

MBOX_LINE = "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001"
PLACEHOLDER_EMAIL = "rocmpatch@invalid"  # for an author given without an address (git am needs one); .invalid never resolves
SEPARATOR = "---"  # ends the message; what follows is the diffstat and the diff
SUBJECT_WIDTH = 78  # format-patch folds the Subject line at 78 columns (RFC 2822)
WHY = "Why: "
# Lines that end a mail's message for `git mailinfo` (its patchbreak): not allowed inside one.
_BREAKS = re.compile(r"^(---(\s|$)|diff -|Index: )")
_PATCH_PREFIX = re.compile(r"^\[PATCH[^\]]*\] ")
_ADDRESS = re.compile(r"^(.*?) <([^<>]*)>$")


@dataclass(frozen=True)
class Header:
    """What a header says, field by field as series.yaml names them, and the line of the file
    (1-based) where each starts. A field the header lacks is ''."""

    author: str = ""
    last_update: str = ""
    name: str = ""
    summary: str = ""
    description: str = ""
    why: str = ""
    lines: dict[str, int] = dataclasses.field(default_factory=dict, compare=False)


# The fields a header carries, in the order they appear (series.yaml's key names).
FIELDS = ("author", "last-update", "name", "summary", "description", "why")


@dataclass(frozen=True)
class Difference:
    """The first place a file's header disagrees with its entry."""

    field: str  # a series.yaml key, or "layout" when every field agrees but the bytes do not
    line: int  # in the patch file, 1-based


def split(text: str) -> tuple[str, str]:
    """(header, rest): the header through its '---' line, and the diffstat and diff after it, byte
    for byte. A file that is not a mail (a plain diff) has the header ''."""
    if not text.startswith("From "):
        return "", text
    offset = 0
    for line in text.splitlines(keepends=True):
        if _BREAKS.match(line):
            end = offset + len(line) if line.rstrip("\r\n") == SEPARATOR else offset
            return text[:end], text[end:]
        offset += len(line)
    return text, ""


def render(entry: SeriesEntry, where: str = "series.yaml") -> str:
    """The header `lock` writes for `entry`, '---' line included. `where` names the entry in
    messages ('<path>: series[3]'); text that would end the message early is refused there."""
    for field in ("description", "why"):
        for number, line in enumerate(getattr(entry, field).splitlines(), start=1):
            if _BREAKS.match(line):
                raise InvalidInput(f"{where}.{field}", f"line {number} starts with {line.split()[0]!r}, which ends a patch's message for git",
                                   hint="reword or indent that line")
    lines = [MBOX_LINE, f"From: {_from(entry.author)}", f"Date: {_date(entry.last_update, where)}",
             *_fold(f"Subject: [PATCH] {entry.name}: {entry.summary}"), ""]
    lines += entry.description.splitlines() + [""]
    lines += (WHY + entry.why).splitlines() + [SEPARATOR]
    return "\n".join(lines) + "\n"


def with_header(entry: SeriesEntry, text: str, where: str = "series.yaml") -> str:
    """The patch file's text with its header written from `entry`; the diff part is kept as it is."""
    return render(entry, where) + split(text)[1]


def read(text: str) -> Header:
    """The fields of a patch file's header (of `split(text)[0]`)."""
    header = split(text)[0]
    if not header:
        return Header()
    lines = header.splitlines()
    fields: dict[str, str] = {}
    starts: dict[str, int] = {}
    index = 1
    while index < len(lines) and lines[index]:  # the mail's header fields, up to the blank line
        key, _, value = lines[index].partition(":")
        starts[key] = index + 1
        while index + 1 < len(lines) and lines[index + 1][:1] in (" ", "\t"):  # folded onto the next line
            index += 1
            value += " " + lines[index].lstrip(" \t")
        fields[key] = value.strip()
        index += 1
    body_start = index + 1
    body = lines[body_start:]
    if body and body[-1].rstrip("\r") == SEPARATOR:
        body = body[:-1]
    why_at = max((i for i, line in enumerate(body) if line.startswith(WHY) and (i == 0 or not body[i - 1])), default=None)
    description, why = (body, []) if why_at is None else (body[:why_at], body[why_at:])
    subject = _PATCH_PREFIX.sub("", fields.get("Subject", ""))
    name, _, summary = subject.partition(": ")
    line_of = {
        "author": starts.get("From", 1), "last-update": starts.get("Date", 1),
        "name": starts.get("Subject", 1), "summary": starts.get("Subject", 1),
        "description": body_start + 1, "why": body_start + 1 + (len(body) if why_at is None else why_at),
    }
    return Header(
        author=_author(fields.get("From", "")), last_update=_last_update(fields.get("Date", "")),
        name=name, summary=summary, description="\n".join(description).strip(),
        why="\n".join(why)[len(WHY):].strip() if why else "", lines=line_of,
    )


def difference(entry: SeriesEntry, text: str, where: str = "series.yaml") -> Difference | None:
    """None when the file's header is exactly what `lock` writes for `entry`; else the first field
    (in the header's order) that says something else, or 'layout' (a "[PATCH 01/10]" count, another
    folding, extra mail fields) at the first line that differs."""
    header = split(text)[0]
    rendered = render(entry, where)
    if header == rendered:
        return None
    found = read(text)
    for field in FIELDS:
        ours, theirs = getattr(entry, field.replace("-", "_")).strip(), getattr(found, field.replace("-", "_"))
        if theirs != ours:
            line = found.lines.get(field, 1)
            if field in ("description", "why"):  # the line of the text where it starts to differ
                line += _first_different_line(theirs, ours)
            return Difference(field, line)
    return Difference("layout", 1 + _first_different_line(header, rendered))


def entry_from_header(text: str, like: SeriesEntry) -> SeriesEntry:
    """A series.yaml entry saying what the header of `text` says, the rest (file, origin, forwarded)
    taken from `like`. For a header written elsewhere (an author's `git format-patch`) whose words
    should become the entry's; `lock` then writes the header back from the entry."""
    found = read(text)
    return dataclasses.replace(
        like, name=found.name or like.name, summary=found.summary or like.summary,
        description=found.description or like.description, why=found.why or like.why,
        author=found.author or like.author, last_update=found.last_update or like.last_update,
    )


def _first_different_line(theirs: str, ours: str) -> int:
    """The 0-based index of the first line where two texts differ."""
    a, b = theirs.splitlines(), ours.splitlines()
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _from(author: str) -> str:
    return author if _ADDRESS.match(author) else f"{author} <{PLACEHOLDER_EMAIL}>"


def _author(value: str) -> str:
    """series.yaml's author from a From: field: the placeholder address is ours, not the author's."""
    found = _ADDRESS.match(value)
    return found.group(1) if found and found.group(2) == PLACEHOLDER_EMAIL else value


def _date(last_update: str, where: str) -> str:
    try:
        day = datetime.date.fromisoformat(last_update)
    except ValueError:
        raise InvalidInput(f"{where}.last-update", f"expected a date YYYY-MM-DD, got {last_update!r}") from None
    return email.utils.format_datetime(datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.timezone.utc))


def _last_update(value: str) -> str:
    try:
        return email.utils.parsedate_to_datetime(value).date().isoformat()
    except (TypeError, ValueError):
        return ""


def _fold(line: str) -> list[str]:
    """A header line folded as format-patch folds a Subject: at spaces, each line at most 78
    columns where it can be, continuation lines indented by one space."""
    words = line.split(" ")
    lines, current = [], words[0]
    for word in words[1:]:
        if len(current) + 1 + len(word) <= SUBJECT_WIDTH:
            current += " " + word
        else:
            lines.append(current)
            current = " " + word
    return lines + [current]
