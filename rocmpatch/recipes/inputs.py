"""What a launch reads on this machine, checked before torchrun starts: the data files of every
--*data-path (Megatron's blend lists: prefixes, or weight prefix pairs), and the tokenizer (a Hugging
Face one loaded offline as Megatron's HuggingFaceTokenizer would, in a child: rocmpatch.data.tokenizer;
the file of the others). Megatron would find out after a minute of start-up, in a long log.

Relative paths are read from the current directory, where torchrun starts.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rocmpatch.data import tokenizer as tokenizers
from rocmpatch.errors import UsageError, shown

DATA_FLAGS = ("--data-path", "--train-data-path", "--valid-data-path", "--test-data-path")
LIST_FILE_FLAGS = ("--data-args-path", "--per-split-data-args-path")
PREPARED = "_text_document"  # what preprocess_data.py (and `rocmpatch data prepare`) appends to --output
NO_MODEL = ("NullTokenizer", "GPT2BPETokenizer", "BertWordPieceLowerCase", "BertWordPieceCase", None)


def _values(value) -> list[str]:
    return [value] if isinstance(value, str) else [str(v) for v in value]


def prefixes(values: list[str]) -> list[str]:
    """The dataset prefixes of a blend list as Megatron reads it (get_blend_from_list): pairs of
    weight and prefix when the list has an even length and every first of a pair is a number."""
    if len(values) % 2 == 0:
        try:
            [float(weight) for weight in values[::2]]
            return [prefix.strip() for prefix in values[1::2]]
        except ValueError:
            pass
    return [prefix.strip() for prefix in values]


def _data_hint(prefix: str) -> str:
    for suffix in (".bin", ".idx"):
        if prefix.endswith(suffix):
            return f"give the prefix without {suffix}: {shown(prefix[:-len(suffix)])}"
    if Path(prefix + PREPARED + ".bin").is_file():
        return f"did you mean {shown(prefix + PREPARED)}? (`rocmpatch data prepare --output {shown(prefix)}` writes that)"
    return "give the prefix of a .bin/.idx pair (`rocmpatch data prepare` prints it: PREFIX_text_document)"


def check_data(args: dict) -> None:
    """UsageError naming the first prefix without its .bin or .idx (or a list file that is missing)."""
    if args.get("--mock-data") is True:
        return
    for flag in DATA_FLAGS:
        if not args.get(flag) or args[flag] is True:
            continue
        for prefix in prefixes(_values(args[flag])):
            missing = [suffix for suffix in (".bin", ".idx") if not Path(prefix + suffix).is_file()]
            if missing:
                raise UsageError(f"{flag} {shown(prefix)}: no {' and no '.join(shown(prefix + suffix) for suffix in missing)}",
                                 hint=_data_hint(prefix))
    for flag in LIST_FILE_FLAGS:
        value = args.get(flag)
        if isinstance(value, str) and not Path(value).is_file():
            raise UsageError(f"{flag} {value}: no such file", hint="give the file that lists the data prefixes")


def check_tokenizer(args: dict) -> str | None:
    """Refuses (one line, as `data prepare` does) a tokenizer Megatron could not load here offline;
    returns a note when it cannot be checked in this Python (no transformers)."""
    kind, model = args.get("--tokenizer-type"), args.get("--tokenizer-model")
    if args.get("--mock-data") is True and kind == "NullTokenizer":
        return None
    if kind == "GPT2BPETokenizer":
        for flag in ("--vocab-file", "--merge-file"):
            if isinstance(args.get(flag), str) and not Path(args[flag]).is_file():
                raise UsageError(f"{flag} {args[flag]}: no such file", hint=f"{kind} reads GPT-2's vocab.json and merges.txt")
        return None
    if kind in NO_MODEL or not isinstance(model, str):
        return None
    if kind != tokenizers.HF_TYPE:  # SentencePiece, TikToken, ...: a local file
        if not Path(model).exists():
            raise UsageError(f"--tokenizer {model}: no such file ({kind} reads a local model file)", hint="give the tokenizer's file")
        return None
    choice = tokenizers.choose(model, False, None)
    refuse = dict(never_downloads="recipe launch loads it offline first (not every rank downloading it)",
                  otherwise="; or `rocmpatch data prepare --train-tokenizer` for data with a tokenizer of its own")
    if choice.kind == tokenizers.HUB:
        reason = tokenizers.not_cached(choice.value)
        if reason:
            tokenizers.refuse_unloadable(choice, reason, **refuse)
    if importlib.util.find_spec("transformers") is None:
        return f"--tokenizer {model}: not checked (transformers, which loads it, is not installed in this Python)"
    answer = tokenizers.finish_probe(tokenizers.start_probe(choice))
    if isinstance(answer, str):
        tokenizers.refuse_unloadable(choice, answer, **refuse)
    return None
