"""rocmpatch cache: each entry with its size and who needs it; prune removes what no release here
needs, keeps what is in use, and --dry-run removes nothing. A real fetched pin, real locks."""

from __future__ import annotations

import json
import os
import time

import pytest

from rocmpatch import store
from rocmpatch.errors import ExitCode
from rocmpatch.files import file_lock

STRANGER = "ab" * 20  # a commit no release here pins


@pytest.fixture
def cache(cli, project, upstream):
    assert cli("fetch").exit_code == 0  # the pin of the project's release, really fetched
    root = store.cache_dir()
    (root / "commits" / f"{STRANGER}.git" / "objects").mkdir(parents=True)
    (root / "commits" / f"{STRANGER}.git" / "objects" / "pack").write_bytes(b"x" * 1000)
    (root / "commits" / f".{STRANGER}.k2j3.partial").mkdir()
    (root / "history" / "0123456789abcdef.git").mkdir(parents=True)
    (root / "logs").mkdir()
    old, new = root / "logs" / "rocmpatch-crash-old.log", root / "logs" / "rocmpatch-crash-new.log"
    old.write_text("old"), new.write_text("new")
    long_ago = time.time() - 90 * 86400
    os.utime(old, (long_ago, long_ago))
    return root


def listed(cli, *args):
    result = cli("cache", *args, "--json")
    return result.exit_code, json.loads(result.stdout)


def names(entries):
    return sorted(os.path.basename(entry["path"]) for entry in entries)


def test_show_names_each_entry_and_who_needs_it(cli, cache, upstream, project):
    code, shown = listed(cli)
    assert code == 0 and shown["cache"] == str(cache)
    by_name = {os.path.basename(e["path"]): e for e in shown["entries"]}
    pin = by_name[f"{upstream.commit}.git"]
    assert pin["kind"] == "pin" and pin["needed"] and project.release in pin["what"] and pin["bytes"] > 0
    assert by_name[f"{STRANGER}.git"]["needed"] is False and by_name[f"{STRANGER}.git"]["bytes"] == 1000
    assert by_name[f".{STRANGER}.k2j3.partial"]["kind"] == "leftover"
    assert by_name["0123456789abcdef.git"]["kind"] == "history"
    assert by_name["rocmpatch-crash-new.log"]["needed"] and not by_name["rocmpatch-crash-old.log"]["needed"]
    text = cli("cache")
    assert text.exit_code == 0 and f"{STRANGER}.git" in text.output and "[prune removes it]" in text.output


def test_prune_removes_what_no_release_needs(cli, cache, upstream):
    code, dry = listed(cli, "prune", "--dry-run")
    assert code == 0 and dry["dry_run"]
    expected = [f".{STRANGER}.k2j3.partial", f"{STRANGER}.git", "rocmpatch-crash-old.log"]
    assert names(dry["removed"]) == expected
    assert (cache / "commits" / f"{STRANGER}.git").is_dir()  # a dry run removes nothing
    code, done = listed(cli, "prune")
    assert code == 0 and names(done["removed"]) == expected and done["bytes"] >= 1000
    assert not (cache / "commits" / f"{STRANGER}.git").exists()
    assert (cache / "commits" / f"{upstream.commit}.git").is_dir() and (cache / "history" / "0123456789abcdef.git").is_dir()
    assert cli("verify", "--help").exit_code == 0 and cli("check").exit_code == 0  # the needed pin still works
    code, again = listed(cli, "prune", "--history")
    assert names(again["removed"]) == ["0123456789abcdef.git"]


def test_prune_all_empties_it_and_the_next_command_fetches_again(cli, cache, upstream):
    code, done = listed(cli, "prune", "--all")
    assert code == 0 and f"{upstream.commit}.git" in names(done["removed"])
    assert not (cache / "commits" / f"{upstream.commit}.git").exists()
    assert cli("check").exit_code == 0  # fetched again from the upstream
    assert (cache / "commits" / f"{upstream.commit}.git").is_dir()


def test_an_entry_in_use_is_kept_and_said(cli, cache):
    with file_lock(cache / "commits" / f"{STRANGER}.lock", wait=0, what="a test's hold"):
        result = cli("cache", "prune")
    assert result.exit_code == ExitCode.BUSY and "in use, kept" in result.output
    assert (cache / "commits" / f"{STRANGER}.git").is_dir()
