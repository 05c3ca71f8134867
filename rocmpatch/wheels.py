"""A built wheel given a local version label (PEP 440 `X.Y.Z+label`), for `rocmpatch package`.

A framework that requires `megatron-core==0.19.1` accepts `0.19.1+rocmpatch.41002d42`: a public
version specifier ignores the candidate's local label (PEP 440), so pip's resolver takes the patched
build, and `pip list` shows that it is not NVIDIA's. Only the metadata changes: the .dist-info
directory's name, METADATA's `Version:` and RECORD (its lines for those files); every file the
package installs keeps its bytes, so `verify --installed` compares them with the patched tree.
The label is put on the built wheel rather than into the tree's version source (package_info.py),
which would then differ from the verified tree.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rocmpatch.errors import InvalidInput
from rocmpatch.files import replace_file

# {distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl (PEP 427)
_WHEEL_NAME = re.compile(r"^(?P<dist>[^-]+)-(?P<version>[^-]+)(?P<rest>(-[^-]+)?-[^-]+-[^-]+-[^-]+)\.whl$")
LOCAL_LABEL = re.compile(r"^[a-z0-9]+(\.[a-z0-9]+)*$")  # PEP 440's local segment, normalized


@dataclass(frozen=True)
class Relabelled:
    path: Path
    distribution: str
    version: str  # with the label


def labelled_version(version: str, label: str) -> str:
    """`version` with `label` as (or appended to) its local part."""
    if not LOCAL_LABEL.match(label):
        raise InvalidInput("--label", f"{label!r} is no PEP 440 local version label", hint="use lower-case letters, digits and dots, such as rocm.mi300x")
    return f"{version}.{label}" if "+" in version else f"{version}+{label}"


def relabel(wheel: Path, label: str, out_dir: Path) -> Relabelled:
    """Write `wheel` with `label` added to its version into out_dir; the original is left as it is."""
    match = _WHEEL_NAME.match(wheel.name)
    if match is None:
        raise InvalidInput(wheel, "not a wheel file name (PEP 427)")
    dist, version = match["dist"], match["version"]
    new_version = labelled_version(version, label)
    old_info, new_info = f"{dist}-{version}.dist-info/", f"{dist}-{new_version}.dist-info/"
    with zipfile.ZipFile(wheel) as source:
        members = [(info, source.read(info)) for info in source.infolist()]
    names = {info.filename for info, _ in members}
    if f"{old_info}METADATA" not in names or f"{old_info}RECORD" not in names:
        raise InvalidInput(wheel, f"has no {old_info}METADATA or RECORD")
    renamed = []
    for info, data in members:
        name = new_info + info.filename[len(old_info):] if info.filename.startswith(old_info) else info.filename
        if name == f"{new_info}METADATA":
            data = _with_version(data, version, new_version, wheel)
        renamed.append((info, name, data))
    digests = {name: _record_hash(data) for _, name, data in renamed}
    out = []
    for info, name, data in renamed:
        if name == f"{new_info}RECORD":
            data = _record(data, old_info, new_info, digests)
        out.append((info, name, data))
    target = out_dir / f"{dist}-{new_version}{match['rest']}.whl"
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(partial, "w") as written:
        for info, name, data in out:
            copy = zipfile.ZipInfo(name, date_time=info.date_time)
            copy.compress_type, copy.external_attr, copy.create_system = info.compress_type, info.external_attr, info.create_system
            written.writestr(copy, data)
    replace_file(target, partial.read_bytes())
    partial.unlink()
    return Relabelled(target, dist, new_version)


def _with_version(metadata: bytes, old: str, new: str, wheel: Path) -> bytes:
    head, separator, body = metadata.partition(b"\n\n")  # the headers end at the first empty line
    lines = head.split(b"\n")
    at = next((i for i, line in enumerate(lines) if line == f"Version: {old}".encode()), None)
    if at is None:
        raise InvalidInput(wheel, f"METADATA does not say 'Version: {old}' as the file name does")
    lines[at] = f"Version: {new}".encode()
    return b"\n".join(lines) + separator + body


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest},{len(data)}"


def _record(record: bytes, old_info: str, new_info: str, digests: dict[str, str]) -> bytes:
    """RECORD (CSV: path, hash, size) with the .dist-info paths renamed and their hashes recomputed."""
    rows = []
    for row in csv.reader(io.StringIO(record.decode("utf-8"))):
        if row and row[0].startswith(old_info):
            path = new_info + row[0][len(old_info):]
            row = [path, "", ""] if path.endswith("/RECORD") else [path, *digests[path].split(",")]
        rows.append(row)
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerows(rows)
    return text.getvalue().encode("utf-8")
