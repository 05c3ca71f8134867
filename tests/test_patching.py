from __future__ import annotations

import pytest

from rocmpatch.errors import InvalidInput, PatchConflict
from rocmpatch.patching import apply_patch, parse_patch

DIFF = b"""diff --git a/f.txt b/f.txt
--- a/f.txt
+++ b/f.txt
@@ -2,3 +2,3 @@
 two
-three\r
+THREE\r
 four
"""
FILE = b"one\ntwo\nthree\r\nfour\nfive\n"


def parse(data: bytes, name="p"):
    return parse_patch(data.decode("utf-8", "surrogateescape"), name=name, source=f"{name}.patch")


def test_applies_exactly_keeping_crlf():
    changes = apply_patch(parse(DIFF), {"f.txt": FILE}.get)
    assert changes == {"f.txt": b"one\ntwo\nTHREE\r\nfour\nfive\n"}


def test_no_offset_no_fuzz():
    shifted = b"zero\n" + FILE
    with pytest.raises(PatchConflict, match=r"patch p does not apply: f.txt, hunk 1: .*line 2"):
        apply_patch(parse(DIFF), {"f.txt": shifted}.get)


def test_missing_file_and_existing_new_file():
    with pytest.raises(PatchConflict, match="does not exist"):
        apply_patch(parse(DIFF), {}.get)
    created = b"diff --git a/n b/n\nnew file mode 100644\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\n"
    with pytest.raises(PatchConflict, match="already exists"):
        apply_patch(parse(created), {"n": b"x\n"}.get)


def test_reversed_patch_undoes():
    patch = parse(DIFF)
    after = apply_patch(patch, {"f.txt": FILE}.get)
    assert apply_patch(patch.reversed(), after.get) == {"f.txt": FILE}


@pytest.mark.parametrize("text", [b"garbage\n", b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n"])
def test_unparsable(text):
    with pytest.raises(InvalidInput):
        parse(text)


def test_no_newline_at_end_of_file_is_honoured():
    """git's "\\ No newline at end of file" marks the line before it (unidiff numbers it None)."""
    text = ("diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
            "\\ No newline at end of file\n")
    patch = parse_patch(text, name="nl", source="nl.patch")
    assert apply_patch(patch, {"f": b"a\nb"}.get) == {"f": b"a\nc"}
