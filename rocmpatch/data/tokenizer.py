"""The tokenizer the data is prepared with, checked before any work: a local Hugging Face tokenizer
folder, a hub name already in the local Hugging Face cache (never downloaded here: offline, no retry,
no hang), or a byte-level BPE trained on the corpus with the `tokenizers` library and saved as a
Hugging Face folder (tokenizer.json and its config) that also holds GPT-2's vocab.json and merges.txt,
so that a tree without HuggingFaceTokenizer (GPT2BPETokenizer only) can use it too.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from rocmpatch.data import require
from rocmpatch.errors import EnvironmentProblem, InvalidInput, UsageError

HF_TYPE, GPT2_TYPE = "HuggingFaceTokenizer", "GPT2BPETokenizer"
FOLDER, HUB, TRAIN = "folder", "hub", "train"
END_OF_TEXT = "<|endoftext|>"  # GPT-2's end of document; Megatron's GPT2BPETokenizer looks it up by name
GPT2_FILES = ("vocab.json", "merges.txt")
DEFAULT_VOCAB_SIZE = 4096
MIN_VOCAB_SIZE = 257  # the 256 bytes and the end-of-text token
PROBE_SECONDS = 120
PROBE_MARK = "rocmpatch-tokenizer-probe: "
# Loaded offline: a name not in the cache fails at once instead of retrying the network.
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}

_PROBE = f"""
import json, os, sys
from transformers import AutoTokenizer
name = sys.argv[1]
tokenizer = AutoTokenizer.from_pretrained(name)
folder = name if os.path.isdir(name) else None
if folder is None:
    try:
        from huggingface_hub import snapshot_download
        folder = snapshot_download(name, local_files_only=True)
    except Exception:
        pass
print({PROBE_MARK!r} + json.dumps({{"vocab_size": len(tokenizer), "folder": folder}}), flush=True)
"""


@dataclass(frozen=True)
class TokenizerChoice:
    kind: str  # folder | hub | train
    value: str | None = None  # the folder or the hub name
    vocab_size: int = DEFAULT_VOCAB_SIZE  # train: the most tokens the BPE may have

    def describe(self) -> str:
        if self.kind == TRAIN:
            return f"a byte-level BPE of at most {self.vocab_size} tokens, trained on the corpus"
        return f"{'the folder' if self.kind == FOLDER else 'the Hugging Face cache entry of'} {self.value}"


@dataclass(frozen=True)
class Loaded:
    """What the offline load of a Hugging Face tokenizer found."""

    vocab_size: int
    folder: Path | None  # where its files are (a hub name's snapshot in the cache)


def choose(tokenizer: str | None, train: bool, vocab_size: int | None) -> TokenizerChoice:
    if train == (tokenizer is not None):
        raise UsageError("give --tokenizer DIR|NAME or --train-tokenizer (one of them)",
                         hint="--train-tokenizer trains a byte-level BPE on the corpus, offline; --tokenizer takes a local Hugging Face folder or a name in the local cache")
    if vocab_size is not None and not train:
        raise UsageError("--vocab-size goes with --train-tokenizer", hint="a given tokenizer has its own vocabulary")
    if train:
        require("tokenizers", "--train-tokenizer needs the `tokenizers` library")
        size = DEFAULT_VOCAB_SIZE if vocab_size is None else vocab_size
        if size < MIN_VOCAB_SIZE:
            raise UsageError(f"--vocab-size {size}: at least {MIN_VOCAB_SIZE} (the 256 bytes and the end-of-text token)")
        return TokenizerChoice(TRAIN, vocab_size=size)
    path = Path(tokenizer).expanduser()
    if path.exists():
        if not path.is_dir():
            raise InvalidInput(path, "a file, not a tokenizer folder", hint="give the folder that holds tokenizer.json (or vocab.json and merges.txt)")
        return TokenizerChoice(FOLDER, str(path))
    if tokenizer.startswith(("/", "./", "../", "~")) or tokenizer.endswith("/") or tokenizer.count("/") > 1:
        raise UsageError(f"--tokenizer {tokenizer}: no such folder", hint="give a local tokenizer folder, a Hugging Face name (org/name) or --train-tokenizer")
    return TokenizerChoice(HUB, tokenizer)


def hf_download_line(name: str) -> str:
    return f"hf download {name} --include 'tokenizer*' --local-dir tokenizers/{name.rsplit('/', 1)[-1]}"


def start_probe(choice: TokenizerChoice) -> subprocess.Popen | None:
    """Load a given tokenizer as Megatron's HuggingFaceTokenizer does (AutoTokenizer), offline, in a
    child; None when there is nothing to load (training) or transformers is missing (said later)."""
    if choice.kind == TRAIN or importlib.util.find_spec("transformers") is None:
        return None
    return subprocess.Popen([sys.executable, "-c", _PROBE, choice.value], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env={**os.environ, **OFFLINE}, text=True, errors="replace")


def finish_probe(probe: subprocess.Popen) -> Loaded | str:
    """What the probe found, or why the tokenizer did not load (its last error line)."""
    try:
        output, _ = probe.communicate(timeout=PROBE_SECONDS)
    except subprocess.TimeoutExpired:
        probe.kill()
        probe.communicate()
        return f"it did not load within {PROBE_SECONDS} s"
    for line in output.splitlines():
        if line.startswith(PROBE_MARK):
            answer = json.loads(line[len(PROBE_MARK):])
            return Loaded(answer["vocab_size"], Path(answer["folder"]) if answer["folder"] else None)
    return last_error_line(output)


def transformers_missing(value: str) -> EnvironmentProblem:
    return EnvironmentProblem(f"loading the tokenizer {value} needs transformers (as the tree's HuggingFaceTokenizer does), "
                              "which is not installed: pip install transformers")


def refuse_unloadable(choice: TokenizerChoice, reason: str, *, never_downloads: str = "this command never downloads",
                      otherwise: str = "; or --train-tokenizer") -> None:
    """One line for a given tokenizer that does not load offline: what it needs, and the fix."""
    if choice.kind == HUB:
        short = choice.value.rsplit("/", 1)[-1]
        raise EnvironmentProblem(
            f"tokenizer {choice.value} is not in the local Hugging Face cache, and {never_downloads}: "
            f"it needs the network (and a token, HF_TOKEN, if the repository is gated) or a local folder ({reason})",
            hint=f"where there is network: {hf_download_line(choice.value)}, then --tokenizer tokenizers/{short}{otherwise}")
    raise InvalidInput(choice.value, f"not a Hugging Face tokenizer folder that loads offline ({reason})",
                       hint=f"a folder written by save_pretrained (tokenizer.json, tokenizer_config.json), as {hf_download_line('ORG/NAME')} writes{otherwise}")


def hub_cache() -> Path:
    """Where huggingface_hub keeps downloaded repositories (its own order of variables)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    base = Path(os.environ["XDG_CACHE_HOME"]).expanduser() if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def not_cached(name: str) -> str | None:
    """Why a hub name surely does not load offline (no entry for it in the cache), without starting
    transformers; None when the cache has an entry (the probe then decides)."""
    entry = hub_cache() / f"models--{name.replace('/', '--')}"
    return None if entry.is_dir() else f"{entry} does not exist"


def gpt2_files(folder: Path, shown: str) -> tuple[Path, Path]:
    """vocab.json and merges.txt of a GPT-2 style BPE in `folder`, checked as Megatron's
    GPT2BPETokenizer reads them (the vocabulary must hold <|endoftext|>)."""
    vocab, merges = (folder / name for name in GPT2_FILES)
    missing = [p.name for p in (vocab, merges) if not p.is_file()]
    if missing:
        raise InvalidInput(shown, f"no {' and '.join(missing)}: this tree's tokenizer is GPT2BPETokenizer (no HuggingFaceTokenizer), which reads vocab.json and merges.txt",
                           hint="--train-tokenizer writes both; or give a folder of a GPT-2 style BPE")
    try:
        entries = json.loads(vocab.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidInput(vocab, f"not a JSON vocabulary ({error})") from None
    if not isinstance(entries, dict) or END_OF_TEXT not in entries:
        raise InvalidInput(vocab, f"has no {END_OF_TEXT} token, which GPT2BPETokenizer takes for the end of a document",
                           hint="--train-tokenizer writes a vocabulary with it")
    return vocab, merges


def train(texts: Iterable[str], vocab_size: int, folder: Path) -> int:
    """A byte-level BPE (as GPT-2's and Llama 3's) trained on `texts`, written to `folder` as a Hugging
    Face tokenizer folder plus vocab.json and merges.txt; returns its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[END_OF_TEXT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    folder.mkdir()
    tokenizer.save(str(folder / "tokenizer.json"))
    tokenizer.model.save(str(folder))  # vocab.json, merges.txt
    special = {"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT, "unk_token": END_OF_TEXT}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 30, "clean_up_tokenization_spaces": False, **special}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")
    return tokenizer.get_vocab_size()


def last_error_line(output: str) -> str:
    """The line of a child's output that says what went wrong: the last 'SomethingError: ...' line,
    else the last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.endswith(("Error", "Exception", "Interrupt")) and " " not in head:
            return line
    return lines[-1] if lines else "no output"
