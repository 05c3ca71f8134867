"""Commits: writing them with a fixed identity and trailers, reading their trailers and dates,
and converting between commits and patch files (`git format-patch` / `git mailinfo`)."""

from __future__ import annotations

import datetime
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import git

from rocmpatch.gitcmd.core import _guard, run, run_bytes


@dataclass(frozen=True)
class Identity:
    name: str
    email: str
    date: datetime.datetime  # timezone-aware; a fixed date keeps commit ids reproducible


def commit_tree(repo: git.Repo, tree: str, parent: str, message: str, identity: Identity, trailers: Iterable[tuple[str, str]] = ()) -> str:
    actor = git.Actor(identity.name, identity.email)
    return _guard(
        lambda: git.Commit.create_from_tree(
            repo, repo.tree(tree), message, parent_commits=[repo.commit(parent)], head=False,
            author=actor, committer=actor, author_date=identity.date, commit_date=identity.date,
            trailers=list(trailers) or None,
        ).hexsha
    )


def commit_links(repo: git.Repo, commit: str) -> tuple[dict[str, str], list[str]]:
    """A commit's trailers (the last value wins for a repeated key) and its parents' ids, from
    one read of the raw commit object through GitPython's long-lived `cat-file --batch` (no
    process per commit: history.read walks every commit of a series).

    Trailers are the `Key: value` lines of the message's last paragraph, as git writes them for
    `commit_tree(trailers=...)`; a paragraph with any other line is no trailer block."""
    sha = commit if len(commit) == 40 else repo.rev_parse(commit).hexsha
    raw = _guard(lambda: repo.odb.stream(bytes.fromhex(sha)).read())
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


def commit_date(repo: git.Repo, commit: str) -> datetime.datetime:
    return repo.commit(commit).committed_datetime


@dataclass(frozen=True)
class MailInfo:
    author: str
    email: str
    date: datetime.datetime
    subject: str
    body: str

    def message(self) -> str:
        return f"{self.subject}\n\n{self.body}".rstrip() + "\n"


def mail_info(repo: git.Repo, patch_text: str) -> MailInfo:
    """Author, date and message of a `git format-patch` file (`git mailinfo`)."""
    import email.utils

    with tempfile.TemporaryDirectory() as scratch:
        message, diff = Path(scratch, "msg"), Path(scratch, "patch")
        out = run(repo, "mailinfo", "--encoding=UTF-8", str(message), str(diff), stdin=patch_text.encode("utf-8", "surrogateescape"))
        fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
        body = message.read_text(encoding="utf-8", errors="surrogateescape")
    date = email.utils.parsedate_to_datetime(fields["Date"]) if fields.get("Date") else datetime.datetime.now(datetime.timezone.utc)
    return MailInfo(fields.get("Author", "rocmpatch"), fields.get("Email", "rocmpatch@localhost"), date, fields.get("Subject", ""), body)


def format_patch(repo: git.Repo | Path, commit: str) -> str:
    """The commit as a patch file, in the series' format."""
    out = run_bytes(repo, "format-patch", "--no-ext-diff", "--no-textconv", "-1", "--zero-commit", "--no-signature", "--full-index", "--stdout", commit)
    return out.decode("utf-8", "surrogateescape")
