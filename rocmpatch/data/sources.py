"""Where the documents come from: text files (one document each), JSON lines, parquet, a directory of
those, or a named Hugging Face dataset. `plan` checks what can be checked without reading every
document (paths, types, the libraries a type needs, a parquet file's column); `documents` reads them,
naming the file and line (or row) of anything that is not a document.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from rocmpatch.data import require
from rocmpatch.errors import InvalidInput, UsageError

TEXT, JSONL, PARQUET, HF = "text", "jsonl", "parquet", "huggingface"
SUFFIXES = {".txt": TEXT, ".md": TEXT, ".jsonl": JSONL, ".json": JSONL, ".parquet": PARQUET}
ACCEPTED = ".txt, .md (one document per file), .jsonl, .json (one JSON object per line; .gz too) or .parquet"


@dataclass(frozen=True)
class Source:
    kind: str
    path: Path | None = None  # None: a Hugging Face dataset
    gzipped: bool = False
    dataset: str | None = None
    config: str | None = None
    split: str = "train"

    def __str__(self) -> str:
        if self.kind == HF:
            return f"Hugging Face dataset {self.dataset}" + (f" ({self.config})" if self.config else "") + f", split {self.split}"
        return str(self.path)


@dataclass
class Plan:
    sources: list[Source] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)  # files in a directory that are none of ACCEPTED
    text_key: str = "text"


def kind_of(path: Path) -> tuple[str, bool] | None:
    """(kind, gzipped) from the file name, or None for a file of no accepted type."""
    name = path.name.lower()
    gzipped = name.endswith(".gz")
    suffix = Path(name[:-3] if gzipped else name).suffix
    kind = SUFFIXES.get(suffix)
    if kind is None or (gzipped and kind == PARQUET):  # parquet compresses inside
        return None
    return kind, gzipped


def plan(inputs: list[Path], *, text_key: str = "text", dataset: str | None = None, config: str | None = None,
         split: str = "train") -> Plan:
    result = Plan(text_key=text_key)
    for given in inputs:
        if not given.exists():
            raise UsageError(f"{given}: no such file or directory", hint=f"give files or directories of {ACCEPTED}")
        if given.is_dir():
            found = _walk(given, result)
            if not found:
                raise InvalidInput(given, f"no document file inside (looked for {ACCEPTED})",
                                   hint="give the files themselves, or a directory holding some")
            continue
        kind = kind_of(given)
        if kind is None:
            raise InvalidInput(given, f"not a document file this command reads: give {ACCEPTED}")
        result.sources.append(Source(kind[0], given, kind[1]))
    if dataset is not None:
        require("datasets", f"--hf-dataset {dataset} needs the `datasets` library")
        result.sources.append(Source(HF, dataset=dataset, config=config, split=split))
    if not result.sources:
        raise UsageError("no documents to prepare", hint=f"give files or directories ({ACCEPTED}), or --hf-dataset NAME")
    if any(s.kind == PARQUET for s in result.sources):
        first = next(s for s in result.sources if s.kind == PARQUET)
        require("pyarrow.parquet", f"{first.path}: reading parquet needs pyarrow", package="pyarrow")
        for source in result.sources:
            if source.kind == PARQUET:
                _check_parquet_column(source.path, text_key)
    return result


def _walk(directory: Path, result: Plan) -> int:
    """Every accepted file under `directory`, recursively, in sorted order; hidden entries and other
    files are skipped (and counted, for the summary)."""
    found = 0
    for path in sorted(directory.rglob("*")):
        relative = path.relative_to(directory)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            if path.is_file():
                result.skipped.append(path)
            continue
        kind = kind_of(path)
        if kind is None:
            result.skipped.append(path)
            continue
        result.sources.append(Source(kind[0], path, kind[1]))
        found += 1
    return found


def _check_parquet_column(path: Path, text_key: str) -> None:
    import pyarrow.parquet as pq

    try:
        names = pq.ParquetFile(path).schema_arrow.names
    except Exception as error:  # noqa: BLE001 - pyarrow raises several types for a file that is not parquet
        raise InvalidInput(path, f"not a parquet file pyarrow can read ({type(error).__name__}: {_first_line(error)})") from None
    if text_key not in names:
        raise InvalidInput(path, f"no column {text_key!r} (columns: {', '.join(names)})", hint="--text-key names the column that holds the text")


def documents(source: Source, text_key: str) -> Iterator[str]:
    """The texts of one source, in order; InvalidInput naming the file and line (row) of a bad one."""
    try:
        if source.kind == TEXT:
            with (gzip.open if source.gzipped else open)(source.path, "rb") as stream:
                yield _decoded(source.path, stream.read())
        elif source.kind == JSONL:
            yield from _json_documents(source, text_key)
        elif source.kind == PARQUET:
            yield from _parquet_documents(source.path, text_key)
        else:
            yield from _dataset_documents(source, text_key)
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise InvalidInput(source.path, f"not gzip data it can read ({_first_line(error)})") from None


def _decoded(path: Path, data: bytes, line: int | None = None) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        where = f"{path}:{line}" if line is not None else path
        raise InvalidInput(where, f"not UTF-8 text (byte {error.start} is {data[error.start:error.start + 1]!r})",
                           hint="convert it to UTF-8 (iconv -t UTF-8)") from None


def _json_documents(source: Source, text_key: str) -> Iterator[str]:
    with (gzip.open if source.gzipped else open)(source.path, "rb") as stream:
        name = source.path.name.lower().removesuffix(".gz")
        if name.endswith(".json") and stream.peek(256).lstrip().startswith(b"["):  # a .json file holding one array of objects
            yield from _json_array(source.path, stream.read(), text_key)
            return
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(_decoded(source.path, line, number))
            except json.JSONDecodeError as error:
                raise InvalidInput(f"{source.path}:{number}", f"not JSON ({error.msg}, column {error.colno})",
                                   hint="JSON lines: one object per line, such as {\"text\": \"...\"}") from None
            yield _text_of(record, text_key, f"{source.path}:{number}")


def _json_array(path: Path, data: bytes, text_key: str) -> Iterator[str]:
    try:
        records = json.loads(_decoded(path, data))
    except json.JSONDecodeError as error:
        raise InvalidInput(f"{path}:{error.lineno}", f"not JSON ({error.msg}, column {error.colno})") from None
    if not isinstance(records, list):
        raise InvalidInput(path, "not a JSON array of objects, nor JSON lines")
    for index, record in enumerate(records):
        yield _text_of(record, text_key, f"{path}: item {index}")


def _text_of(record, text_key: str, where: str) -> str:
    if not isinstance(record, dict):
        raise InvalidInput(where, f"a JSON {type(record).__name__}, not an object with a {text_key!r} key")
    if text_key not in record:
        keys = ", ".join(map(str, list(record)[:8])) or "none"
        raise InvalidInput(where, f"no key {text_key!r} (keys: {keys})", hint="--text-key names the key that holds the text")
    value = record[text_key]
    if not isinstance(value, str):
        raise InvalidInput(where, f"{text_key!r} is a JSON {type(value).__name__}, not a string")
    return value


def _parquet_documents(path: Path, text_key: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    row = 0
    for batch in pq.ParquetFile(path).iter_batches(columns=[text_key], batch_size=1024):
        for value in batch.column(0).to_pylist():
            if value is not None and not isinstance(value, str):
                raise InvalidInput(f"{path}: row {row}", f"{text_key!r} is {type(value).__name__}, not text")
            row += 1
            yield value or ""


def _dataset_documents(source: Source, text_key: str) -> Iterator[str]:
    import datasets

    from rocmpatch.errors import UpstreamError

    try:
        rows = datasets.load_dataset(source.dataset, source.config, split=source.split, streaming=True)
        for number, row in enumerate(rows):
            if number == 0 and text_key not in row:
                raise InvalidInput(source, f"no column {text_key!r} (columns: {', '.join(row)})",
                                   hint="--text-key names the column that holds the text")
            yield row[text_key] or ""
    except InvalidInput:
        raise
    except Exception as error:  # noqa: BLE001 - the network, the hub, a missing config: one line
        raise UpstreamError(f"{source}: {type(error).__name__}: {_first_line(error)}",
                            hint="check the name (and --hf-config/--hf-split), the network, and HF_TOKEN for a gated dataset") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
