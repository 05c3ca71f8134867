from __future__ import annotations

from pathlib import Path

from rocmpatch import series, store
from rocmpatch.commands import selected
from rocmpatch.console import out
from rocmpatch.errors import ExitCode


def run(*, upstream_url: str | None, series_dir: Path | None, release: str | None = None) -> ExitCode:
    loaded = series.load(selected(series_dir, release))
    lock = loaded.locked()
    repo = store.cached_repo(lock.upstream, upstream_url)
    out.print(f"{loaded.location.release}: {lock.upstream.ref} {lock.upstream.commit} (tree {lock.upstream.tree}) is in {repo.git_dir}", markup=False)
    return ExitCode.OK
