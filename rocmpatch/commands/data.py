"""`rocmpatch data prepare`: documents to Megatron's .bin/.idx with the tree's own preprocess_data.py."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.text import Text

from rocmpatch.console import err, is_terminal, out
from rocmpatch.data.prepare import Prepared, Progress, Request, prepare
from rocmpatch.data.tokenizer import HF_TYPE
from rocmpatch.errors import ExitCode


def run_prepare(*, inputs: tuple[Path, ...], target: Path, output: Path, tokenizer: str | None, train_tokenizer: bool,
                vocab_size: int | None, text_key: str, hf_dataset: str | None, hf_config: str | None, hf_split: str,
                workers: int | None, force: bool) -> ExitCode:
    request = Request(list(inputs), target, output, tokenizer=tokenizer, train_tokenizer=train_tokenizer, vocab_size=vocab_size,
                      text_key=text_key, dataset=hf_dataset, dataset_config=hf_config, dataset_split=hf_split,
                      workers=workers, force=force)
    with Shown() as progress:
        prepared = prepare(request, progress)
    for line in summary(prepared):
        out.print(line, markup=False)
    return ExitCode.OK


class Shown(Progress):
    """On a terminal one status line that follows the work; elsewhere (a pipe, a log) one plain line
    per step and per progress report, written as it happens."""

    def __init__(self) -> None:
        self._status = None

    def __enter__(self) -> "Shown":
        if is_terminal():
            self._status = err.rich.status("data: starting", spinner="dots")
            self._status.__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._status is not None:
            self._status.__exit__(*exc_info)

    def _say(self, line: str, *, keep: bool) -> None:
        if self._status is None:
            err.print(line, markup=False)
            return
        if keep:
            self._status.console.print(Text(line))
        self._status.update(Text(line))

    def step(self, what: str) -> None:
        self._say(f"data: {what}", keep=True)

    def documents(self, phase: str, count: int, total: int | None = None) -> None:
        self._say(f"data: {phase} {count}{f' of {total}' if total else ''} documents", keep=False)


def summary(prepared: Prepared) -> list[str]:
    index = prepared.index
    data = shlex.quote(str(prepared.outputs.data_prefix))
    lines = [f"wrote {prepared.outputs.bin} and .idx: {index.documents} documents, {index.tokens} tokens "
             f"({index.dtype}), in {prepared.seconds:.1f} s"]
    if prepared.empty_documents:
        lines.append(f"left out {prepared.empty_documents} empty document(s)")
    if prepared.skipped_files:
        lines.append(f"skipped {len(prepared.skipped_files)} file(s) of other types or hidden (first: {prepared.skipped_files[0]})")
    if prepared.trained:
        lines.append(f"tokenizer: {prepared.tokenizer}, a byte-level BPE of {prepared.vocab_size} tokens trained on this corpus "
                     "(a Hugging Face folder, with vocab.json and merges.txt)")
    elif prepared.vocab_size:
        lines.append(f"tokenizer: {prepared.tokenizer} ({prepared.vocab_size} tokens, loaded offline)")
    tokenizer = shlex.quote(prepared.tokenizer)
    if prepared.tokenizer_type == HF_TYPE:
        lines.append(f"for rocmpatch recipe launch: --data-path {data} --tokenizer {tokenizer}")
        lines.append(f"for pretrain_gpt.py: --data-path {data} --tokenizer-type {HF_TYPE} --tokenizer-model {tokenizer}")
    else:
        lines.append(f"for pretrain_gpt.py: --data-path {data} --tokenizer-type {prepared.tokenizer_type} "
                     f"--vocab-file {shlex.quote(str(prepared.vocab_file))} --merge-file {shlex.quote(str(prepared.merge_file))}")
    return lines
