"""Commits: writing them with a fixed identity and trailers, reading their trailers and dates,
and converting between commits and patch files (`git format-patch` / `git mailinfo`)."""

from __future__ import annotations

import datetime
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from rocmpatch.errors import UpstreamError
from rocmpatch.gitcmd.core import GitFailed, Repo, _execute, read_object, resolve_commit, run, run_bytes
from rocmpatch.gitcmd.objects import write_object


@dataclass(frozen=True)
class Identity:
    name: str
    email: str
    date: datetime.datetime  # timezone-aware; a fixed date keeps commit ids reproducible


def commit_tree(repo: Repo, tree: str, parent: str, message: str, identity: Identity, trailers: Iterable[tuple[str, str]] = ()) -> str:
    """A new commit object (no ref moves): tree on parent, author and committer `identity`, the
    trailers added to the message by `git interpret-trailers`, written in this process. The
    object is laid out as GitPython wrote it, so a series applied before keeps its commit ids;
    always UTF-8 (whatever i18n.commitEncoding says), so the ids do not depend on the machine."""
    for value in (identity.name, identity.email):
        if value and any(char in value for char in "<>\n"):
            raise ValueError(f"Commit identity {value!r} must not contain '<', '>' or a line feed")
    when = identity.date
    if when.tzinfo is None:
        raise ValueError(f"commit date {when} has no time zone")
    tree_id = read_object(repo, f"{tree}^{{tree}}")[0]
    parent_id = resolve_commit(repo, parent)
    if parent_id is None:
        raise UpstreamError(f"git commit-tree failed: fatal: not a valid commit: {parent}")
    trailers = list(trailers)
    if trailers:
        message = _with_trailers(message, trailers)
    person = f"{identity.name} <{identity.email}> {int(when.timestamp())} {_git_offset(when)}"
    text = f"tree {tree_id}\nparent {parent_id}\nauthor {person}\ncommitter {person}\n\n{message}"
    return write_object(repo, "commit", text.encode("utf-8", "surrogateescape"))


def _with_trailers(message: str, trailers: list[tuple[str, str]]) -> str:
    """`git interpret-trailers`, run in an empty directory outside any repository: a target's
    own config may neither run a program (`trailer.<key>.cmd`) nor change rocmpatch's commits."""
    arguments = [argument for key, value in trailers for argument in ("--trailer", f"{key}: {value}")]
    with tempfile.TemporaryDirectory(prefix="rocmpatch-trailers-") as nowhere:
        try:
            done = _execute(nowhere, ["interpret-trailers", *arguments], stdin=message.encode("utf-8", "surrogateescape"),
                            env={"GIT_CEILING_DIRECTORIES": os.path.dirname(nowhere)}, overrides=False)
        except GitFailed as exc:
            raise exc.one_line() from None
    return done.stdout.decode("utf-8", "surrogateescape")


def _git_offset(when: datetime.datetime) -> str:
    """The time zone as a commit header writes it: +HHMM / -HHMM."""
    west = -int(when.utcoffset().total_seconds())
    hours, minutes = abs(west) // 3600, (abs(west) % 3600) // 60
    return f"{'-' if west >= 60 else '+'}{hours:02}{minutes:02}"


def commit_links(repo: Repo, commit: str) -> tuple[dict[str, str], list[str]]:
    """A commit's trailers (the last value wins for a repeated key) and its parents' ids, from
    one read of the raw commit object through the repository's long-lived `cat-file --batch` (no
    process per commit: history.read walks every commit of a series).

    Trailers are the `Key: value` lines of the message's last paragraph, as git writes them for
    `commit_tree(trailers=...)`; a paragraph with any other line is no trailer block."""
    raw = read_object(repo, commit)[2]
    header, _, message = raw.decode("utf-8", "surrogateescape").partition("\n\n")
    parents = [line[7:] for line in header.splitlines() if line.startswith("parent ")]
    paragraphs = [p for p in message.strip("\n").split("\n\n") if p.strip()]
    trailers: dict[str, str] = {}
    if paragraphs:
        lines = paragraphs[-1].splitlines()
        pairs = [line.partition(": ") for line in lines]
        if all(sep and key and " " not in key for key, sep, _ in pairs):
            trailers = {key: value.strip() for key, _, value in pairs}
    return trailers, parents


_COMMITTER = re.compile(r"^committer .*> (\d+) ([+-])(\d\d)(\d\d)", re.MULTILINE)


def commit_date(repo: Repo, commit: str) -> datetime.datetime:
    """The committer date, in the committer's time zone."""
    raw = read_object(repo, f"{commit}^{{commit}}")[2]
    header = raw.decode("utf-8", "surrogateescape").partition("\n\n")[0]
    found = _COMMITTER.search(header)
    if found is None:
        raise UpstreamError(f"{commit}: a commit without a committer date")
    seconds, sign, hours, minutes = found.groups()
    east = (1 if sign == "+" else -1) * (int(hours) * 3600 + int(minutes) * 60)
    return datetime.datetime.fromtimestamp(int(seconds), datetime.timezone(datetime.timedelta(seconds=east)))


@dataclass(frozen=True)
class MailInfo:
    author: str
    email: str
    date: datetime.datetime
    subject: str
    body: str

    def message(self) -> str:
        return f"{self.subject}\n\n{self.body}".rstrip() + "\n"


def mail_info(repo: Repo, patch_text: str) -> MailInfo:
    """Author, date and message of a `git format-patch` file (`git mailinfo`)."""
    import email.utils

    with tempfile.TemporaryDirectory() as scratch:
        message, diff = Path(scratch, "msg"), Path(scratch, "patch")
        out = run(repo, "mailinfo", "--encoding=UTF-8", str(message), str(diff), stdin=patch_text.encode("utf-8", "surrogateescape"))
        fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
        body = message.read_text(encoding="utf-8", errors="surrogateescape")
    date = email.utils.parsedate_to_datetime(fields["Date"]) if fields.get("Date") else datetime.datetime.now(datetime.timezone.utc)
    return MailInfo(fields.get("Author", "rocmpatch"), fields.get("Email", "rocmpatch@localhost"), date, fields.get("Subject", ""), body)


def format_patch(repo: Repo | Path, commit: str) -> str:
    """The commit as a patch file, in the series' format."""
    out = run_bytes(repo, "format-patch", "--no-ext-diff", "--no-textconv", "-1", "--zero-commit", "--no-signature", "--full-index", "--stdout", commit)
    return out.decode("utf-8", "surrogateescape")
