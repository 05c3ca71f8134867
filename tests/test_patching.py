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
    """git's "\\ No newline at end of file" marks the line before it."""
    text = ("diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
            "\\ No newline at end of file\n")
    patch = parse_patch(text, name="nl", source="nl.patch")
    assert apply_patch(patch, {"f": b"a\nb"}.get) == {"f": b"a\nc"}


def test_plain_multi_file_diff_blank_context_and_overlong_hunk():
    text = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n--- a/y\n+++ b/y\n@@ -1,3 +1,3 @@\n c\n\n-d\n+e\n"
    patch = parse_patch(text, name="two", source="two.patch")
    assert [f.path for f in patch.files] == ["x", "y"]
    assert apply_patch(patch, {"x": b"a\n", "y": b"c\n\nd\n"}.get) == {"x": b"b\n", "y": b"c\n\ne\n"}
    with pytest.raises(InvalidInput, match="longer than its header"):
        parse_patch("--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n+c\n", name="long", source="long.patch")
    with pytest.raises(InvalidInput, match="shorter than its header"):
        parse_patch("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n-b\n", name="short", source="short.patch")


def test_large_patch_is_parsed_without_a_parse_tree_many_times_its_size():
    """A patch is read in one pass: the parse costs about its size in hunk lines, not ~15x."""
    import tracemalloc

    body = "".join(f"+value_{j} = {j}  # padding padding padding\n" for j in range(100_000))
    text = f"diff --git a/big.py b/big.py\nnew file mode 100644\n--- /dev/null\n+++ b/big.py\n@@ -0,0 +1,100000 @@\n{body}"
    tracemalloc.start()
    patch = parse_patch(text, name="big", source="big.patch")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(patch.files[0].hunks[0].new_lines) == 100_000
    assert peak < 3 * len(text), (peak, len(text))
