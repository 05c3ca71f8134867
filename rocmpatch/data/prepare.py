"""`rocmpatch data prepare`: documents -> one JSON-lines file -> the tree's preprocess_data.py ->
Megatron's PREFIX_text_document.bin/.idx (and, with a trained tokenizer, PREFIX_tokenizer/).

Everything that can be checked is checked before the work: the tree's script, the output (absent
unless --force, its folder writable), the inputs (paths, types, libraries), the tokenizer (loaded
offline) and what the tree accepts. The work happens in a temporary folder beside the output; the
results are renamed into place at the end, so a failure or Ctrl-C leaves nothing half-written.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from rocmpatch.data import preprocess, sources
from rocmpatch.data import tokenizer as tokenizers
from rocmpatch.data.idx import IndexSummary, check_pair
from rocmpatch.data.tokenizer import GPT2_TYPE, HF_TYPE, OFFLINE, TokenizerChoice
from rocmpatch.errors import CheckFailed, EnvironmentProblem, InvalidInput, UsageError
from rocmpatch.processes import interruption_point

TEXT_KEY = "text"  # the key of the JSON lines handed to preprocess_data.py
DOCUMENT_SUFFIX = f"_{TEXT_KEY}_document"  # what preprocess_data.py appends: PREFIX_text_document.bin
TOKENIZER_SUFFIX = "_tokenizer"
MAX_WORKERS = 8
PROGRESS_LINES = 20  # about this many "Processed N documents" lines from the child


@dataclass(frozen=True)
class Request:
    inputs: list[Path]
    target: Path
    output: Path  # the prefix: OUTPUT_text_document.bin/.idx, OUTPUT_tokenizer/
    tokenizer: str | None = None
    train_tokenizer: bool = False
    vocab_size: int | None = None
    text_key: str = "text"
    dataset: str | None = None
    dataset_config: str | None = None
    dataset_split: str = "train"
    workers: int | None = None
    force: bool = False


@dataclass
class Outputs:
    data_prefix: Path
    tokenizer_folder: Path | None

    @property
    def bin(self) -> Path:
        return Path(f"{self.data_prefix}.bin")

    @property
    def idx(self) -> Path:
        return Path(f"{self.data_prefix}.idx")

    def paths(self) -> list[Path]:
        return [self.bin, self.idx] + ([self.tokenizer_folder] if self.tokenizer_folder else [])


@dataclass
class Prepared:
    outputs: Outputs
    index: IndexSummary
    seconds: float
    tokenizer_type: str  # HuggingFaceTokenizer | GPT2BPETokenizer
    tokenizer: str  # what --tokenizer-model (recipe launch's --tokenizer) takes, or the GPT-2 folder
    vocab_size: int | None  # the tokenizer's, where known
    trained: bool
    vocab_file: Path | None = None
    merge_file: Path | None = None
    skipped_files: list[Path] = field(default_factory=list)
    empty_documents: int = 0


class Progress:
    """What the work reports as it goes (the command renders it): a phase, or documents so far."""

    def step(self, what: str) -> None: ...

    def documents(self, phase: str, count: int, total: int | None = None) -> None: ...


def outputs_for(request: Request) -> Outputs:
    if request.output.name in ("", ".", "..") or str(request.output).endswith(os.sep):
        raise UsageError(f"--output {request.output}: give a file prefix such as data/corpus, not a directory",
                         hint=f"it writes PREFIX{DOCUMENT_SUFFIX}.bin and .idx")
    prefix = request.output.expanduser()
    folder = Path(f"{prefix}{TOKENIZER_SUFFIX}") if request.train_tokenizer else None
    return Outputs(Path(f"{prefix}{DOCUMENT_SUFFIX}"), folder)


def check_output(outputs: Outputs, force: bool) -> list[Path]:
    """Refuse existing outputs (unless force) and a folder that cannot be written; returns the
    folders that are missing (made when the work starts)."""
    existing = [p for p in outputs.paths() if os.path.lexists(p)]
    if existing and not force:
        raise UsageError(f"{existing[0]} already exists{f' (and {len(existing) - 1} more of the outputs)' if len(existing) > 1 else ''}; nothing was written",
                         hint="choose another --output, or add --force to replace them")
    parent = outputs.data_prefix.parent
    missing: list[Path] = []
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"{parent} is a file, not a folder for the output", hint="choose another --output")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise EnvironmentProblem(f"{parent}: not writable, so the output cannot go there", hint="choose another --output, or fix the permissions")
    return list(reversed(missing))


def prepare(request: Request, progress: Progress) -> Prepared:
    started = time.monotonic()
    tree = request.target.expanduser().absolute()  # the children run in the work folder
    preprocess.script_of(tree)
    outputs = outputs_for(request)
    missing_folders = check_output(outputs, request.force)
    plan = sources.plan(request.inputs, text_key=request.text_key, dataset=request.dataset, config=request.dataset_config,
                        split=request.dataset_split)
    choice = tokenizers.choose(request.tokenizer, request.train_tokenizer, request.vocab_size)

    progress.step(f"reading the documents; meanwhile checking the tokenizer ({choice.describe()}) "
                  f"and asking {tree / preprocess.SCRIPT} what it takes")
    for folder in missing_folders:
        folder.mkdir()
    work = Path(tempfile.mkdtemp(prefix=f".{outputs.data_prefix.name}.", suffix=".rocmpatch-tmp", dir=outputs.data_prefix.parent)).absolute()
    log = None
    checks = None
    try:
        checks = _Checks(tree, work, choice)
        corpus = work / "corpus.jsonl"
        count, empty = _write_corpus(plan, corpus, progress, checks.poll)
        abilities, answer = checks.finish()
        kind = abilities.tokenizer_type()
        loaded, gpt2 = _tokenizer_for(kind, choice, answer)

        vocab_size = loaded.vocab_size if loaded else None
        tokenizer_value = choice.value
        staged_tokenizer = None
        if choice.kind == tokenizers.TRAIN:
            progress.step(f"training a byte-level BPE of at most {choice.vocab_size} tokens on {count} documents")
            staged_tokenizer = work / "tokenizer"
            vocab_size = tokenizers.train(_texts(corpus), choice.vocab_size, staged_tokenizer)
            gpt2 = (staged_tokenizer / "vocab.json", staged_tokenizer / "merges.txt") if kind == GPT2_TYPE else None

        workers = request.workers or max(1, min(os.cpu_count() or 1, MAX_WORKERS, count // 1000 + 1))
        args = _child_args(kind, abilities, choice, corpus=corpus, prefix=work / "out", workers=workers, documents=count,
                           model=staged_tokenizer, gpt2=gpt2)
        log = _log_path()
        progress.step(f"tokenizing {count} documents with {tree / preprocess.SCRIPT} ({kind}, {workers} worker(s))")
        code, last = preprocess.run(tree, args, workdir=work, log=log, env=OFFLINE,
                                    on_progress=lambda n: progress.documents("tokenized", n, count))
        staged = Outputs(work / f"out{DOCUMENT_SUFFIX}", staged_tokenizer)
        if code != 0 or not staged.idx.is_file():
            why = last if code != 0 else f"it exited 0 without writing {staged.idx.name}; its last line: {last}"
            raise CheckFailed(f"{tree / preprocess.SCRIPT} failed: {why}", hint=f"its whole output is in {log}; nothing was written")
        index = check_pair(staged.bin, staged.idx)
        interruption_point("data-prepare-staged")
        _put_in_place(staged, outputs, work)
    except BaseException:
        if checks is not None:
            checks.stop()
        _discard(work, missing_folders)
        raise
    shutil.rmtree(work, ignore_errors=True)
    log.unlink(missing_ok=True)

    final_tokenizer = str(outputs.tokenizer_folder) if outputs.tokenizer_folder else str(tokenizer_value)
    vocab_file = merge_file = None
    if kind == GPT2_TYPE:
        folder = outputs.tokenizer_folder or gpt2[0].parent
        vocab_file, merge_file = folder / "vocab.json", folder / "merges.txt"
        final_tokenizer = str(folder)
    return Prepared(outputs, index, time.monotonic() - started, kind, final_tokenizer, vocab_size, choice.kind == tokenizers.TRAIN,
                    vocab_file, merge_file, plan.skipped, empty)


def _tokenizer_for(kind: str, choice: TokenizerChoice, answer) -> tuple[tokenizers.Loaded | None, tuple[Path, Path] | None]:
    """What the tree's tokenizer type needs of the given tokenizer: loaded by AutoTokenizer
    (HuggingFaceTokenizer), or GPT-2's vocab.json and merges.txt (GPT2BPETokenizer)."""
    if kind == HF_TYPE and choice.kind != tokenizers.TRAIN:
        if answer is None:
            raise tokenizers.transformers_missing(choice.value)
        if isinstance(answer, str):
            tokenizers.refuse_unloadable(choice, answer)
    if kind == HF_TYPE and choice.kind == tokenizers.TRAIN and not _importable("transformers"):
        raise EnvironmentProblem("the tree loads the trained tokenizer with transformers (its HuggingFaceTokenizer), which is not installed: pip install transformers")
    loaded = answer if isinstance(answer, tokenizers.Loaded) else None
    if kind != GPT2_TYPE or choice.kind == tokenizers.TRAIN:
        return loaded, None
    folder = Path(choice.value) if choice.kind == tokenizers.FOLDER else (loaded.folder if loaded else None)
    if folder is None:
        raise InvalidInput(choice.value, "this tree takes GPT2BPETokenizer only, and the files of this cache entry were not found",
                           hint="give --tokenizer a folder holding vocab.json and merges.txt, or --train-tokenizer")
    return loaded, tokenizers.gpt2_files(folder, choice.value)


def _child_args(kind: str, abilities: preprocess.TreeAbilities, choice: TokenizerChoice, *, corpus: Path, prefix: Path,
                workers: int, documents: int, model: Path | None, gpt2: tuple[Path, Path] | None) -> list[str]:
    """preprocess_data.py's flags. The child runs in the work folder: local paths go absolute."""
    args = ["--input", str(corpus), "--json-keys", TEXT_KEY, "--output-prefix", str(prefix),
            "--workers", str(workers), "--append-eod", "--tokenizer-type", kind]
    if kind == HF_TYPE:
        model = model or (Path(choice.value).absolute() if choice.kind == tokenizers.FOLDER else choice.value)
        args += ["--tokenizer-model", str(model)]
    else:
        args += ["--vocab-file", str(gpt2[0].absolute()), "--merge-file", str(gpt2[1].absolute())]
    if "--log-interval" in abilities.flags:
        args += ["--log-interval", str(max(1, documents // PROGRESS_LINES))]
    return args


def _discard(work: Path, made: list[Path]) -> None:
    """What a failed or interrupted run wrote: the work folder, and the output folders it made."""
    shutil.rmtree(work, ignore_errors=True)
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            break


class _Checks:
    """The two slow checks, in children while the documents are read: the tokenizer loaded offline,
    and the tree's --help. A tokenizer that loads nowhere stops the work as soon as its child says so."""

    def __init__(self, tree: Path, work: Path, choice: TokenizerChoice) -> None:
        self.tree, self.choice, self.answer = tree, choice, None
        uncached = tokenizers.not_cached(choice.value) if choice.kind == tokenizers.HUB else None
        if uncached:  # surely not loadable offline: said at once, before any child starts
            tokenizers.refuse_unloadable(choice, uncached)
        self.help = preprocess.start_help(tree, work)
        self.probe = tokenizers.start_probe(choice)
        if self.probe is None and choice.kind == tokenizers.HUB:
            raise tokenizers.transformers_missing(choice.value)

    def poll(self) -> None:
        if self.probe is not None and self.answer is None and self.probe.poll() is not None:
            self._take_probe()
        if self.help.poll() not in (None, 0):
            preprocess.finish_help(self.tree, self.help)  # raises, naming its last error line

    def finish(self) -> tuple[preprocess.TreeAbilities, tokenizers.Loaded | str | None]:
        if self.probe is not None and self.answer is None:
            self._take_probe()
        return preprocess.finish_help(self.tree, self.help), self.answer

    def stop(self) -> None:
        for child in (self.help, self.probe):
            if child is not None:
                preprocess.stop(child)

    def _take_probe(self) -> None:
        self.answer = tokenizers.finish_probe(self.probe)
        # Loaded nowhere: not by AutoTokenizer, and no GPT-2 files for a tree without it either.
        if isinstance(self.answer, str) and not _has_gpt2_files(self.choice):
            tokenizers.refuse_unloadable(self.choice, self.answer)


def _has_gpt2_files(choice: TokenizerChoice) -> bool:
    return choice.kind == tokenizers.FOLDER and all((Path(choice.value) / name).is_file() for name in tokenizers.GPT2_FILES)


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _write_corpus(plan: sources.Plan, corpus: Path, progress: Progress, poll: Callable[[], None]) -> tuple[int, int]:
    """Every document as one JSON line {"text": ...}; (documents written, empty ones left out).
    `poll` runs every half second (the checks running meanwhile may stop the work)."""
    count = empty = 0
    shown = polled = time.monotonic()
    with open(corpus, "w", encoding="utf-8") as stream:
        for source in plan.sources:
            for text in sources.documents(source, plan.text_key):
                if not text.strip():
                    empty += 1
                    continue
                stream.write(json.dumps({TEXT_KEY: text}, ensure_ascii=False) + "\n")
                count += 1
                now = time.monotonic()
                if now - polled > 0.5:
                    poll()
                    polled = now
                if now - shown > 2.0:
                    progress.documents("read", count)
                    shown = now
    if count == 0:
        raise InvalidInput(plan.sources[0], f"no document with text in {len(plan.sources)} source(s) ({empty} empty)")
    progress.documents("read", count)
    return count, empty


def _texts(corpus: Path) -> Iterator[str]:
    with open(corpus, encoding="utf-8") as stream:
        for line in stream:
            yield json.loads(line)[TEXT_KEY]


def _log_path() -> Path:
    from rocmpatch.store import log_dir

    directory = log_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    handle, name = tempfile.mkstemp(prefix=f"data-prepare-{stamp}-", suffix=".log", dir=directory)
    os.close(handle)
    return Path(name)


def _put_in_place(staged: Outputs, outputs: Outputs, work: Path) -> None:
    """Rename the staged results over the outputs: the tokenizer first, the index last (a .idx is
    there only when its .bin is). A replaced tokenizer folder is moved aside first, then deleted."""
    if staged.tokenizer_folder is not None:
        if os.path.lexists(outputs.tokenizer_folder):
            os.replace(outputs.tokenizer_folder, work / "replaced-tokenizer")
        os.replace(staged.tokenizer_folder, outputs.tokenizer_folder)
    os.replace(staged.bin, outputs.bin)
    os.replace(staged.idx, outputs.idx)
