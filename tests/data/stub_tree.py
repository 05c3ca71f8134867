"""A stand-in for a Megatron tree's tools/preprocess_data.py, for the CI tests of `data prepare`
(the real one needs the whole tree: tests/data/test_prepare_trains.py). It answers --help as a tree
does (STUB_TOKENIZER_TYPES picks what its --tokenizer-type lists), and otherwise writes the
.bin/.idx pair in Megatron's format with one token per UTF-8 byte (+ an end-of-document token),
printing "Processed N documents" as upstream does; STUB_FAIL makes it fail as a worker would."""

from __future__ import annotations

from pathlib import Path

SCRIPT = r'''
import argparse, json, os, struct, sys, time

types = os.environ.get("STUB_TOKENIZER_TYPES", "GPT2BPETokenizer,HuggingFaceTokenizer,NullTokenizer")
if "--help" in sys.argv:
    print(f"usage: preprocess_data.py [-h] --input INPUT [--json-keys JSON_KEYS] --tokenizer-type {{{types}}}")
    print("  [--tokenizer-model M] [--vocab-file V] [--merge-file M] [--append-eod] --output-prefix P --workers W [--log-interval N]")
    sys.exit(0)
parser = argparse.ArgumentParser()
for flag in ("--input", "--output-prefix", "--tokenizer-type", "--tokenizer-model", "--vocab-file", "--merge-file"):
    parser.add_argument(flag)
parser.add_argument("--json-keys", nargs="+")
parser.add_argument("--workers", type=int)
parser.add_argument("--log-interval", type=int, default=1000)
parser.add_argument("--append-eod", action="store_true")
args = parser.parse_args()
with open(os.environ["STUB_RECORD"], "w") as record:
    json.dump(sys.argv[1:], record)
if os.environ.get("STUB_FAIL"):
    print("Opening", args.input)
    print("Traceback (most recent call last):", file=sys.stderr)
    print('  File "tools/preprocess_data.py", line 1, in <module>', file=sys.stderr)
    print("OSError: stub: the tokenizer files are gone", file=sys.stderr)
    sys.exit(1)
lengths = []
with open(args.output_prefix + "_text_document.bin", "wb") as out:
    for number, line in enumerate(open(args.input, encoding="utf-8"), start=1):
        tokens = list(json.loads(line)["text"].encode("utf-8")) + [0]
        out.write(struct.pack(f"<{len(tokens)}H", *tokens))
        lengths.append(len(tokens))
        if number % args.log_interval == 0:
            print(f"Processed {number} documents (0.0 docs/s, 0.0 MB/s).", file=sys.stderr, flush=True)
pointers, offset = [], 0
for length in lengths:
    pointers.append(offset)
    offset += 2 * length
with open(args.output_prefix + "_text_document.idx", "wb") as idx:
    idx.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lengths), len(lengths) + 1))
    idx.write(struct.pack(f"<{len(lengths)}i", *lengths))
    idx.write(struct.pack(f"<{len(lengths)}q", *pointers))
    idx.write(struct.pack(f"<{len(lengths) + 1}q", *range(len(lengths) + 1)))
'''


def make_tree(root: Path) -> Path:
    """A folder that holds tools/preprocess_data.py (the stub) and nothing else of Megatron's."""
    (root / "tools").mkdir(parents=True)
    (root / "tools" / "preprocess_data.py").write_text(SCRIPT)
    return root
