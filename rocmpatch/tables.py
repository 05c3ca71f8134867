"""Tables whose cells are never cut: what a user copies from them (release names, commits, paths)
stays whole at any width.

Rich shortens a cell that does not fit with an ellipsis (`core_v0.19…`, `5be9626709…`). Here every
column folds instead (wraps at spaces, and inside a word only where a word is wider than its
column), and a table wider than the terminal is sized here: every column keeps its longest word if
all fit; else the `whole` columns keep theirs (in the order `whole` names them: the first is what a
user copies most) and the others fold; and where
not one `whole` column fits, each row is printed as lines of `header: value` instead of a table.
Rich is imported only when a table is printed.
"""

from __future__ import annotations

from typing import Any, Iterable

# Per column: one space of padding on each side and one border; plus the table's left edge.
_PADDING_AND_BORDER = 3
# While deciding which `whole` columns keep their words: the least a folding column is left.
_FOLDED_AT_LEAST = 8


class Table:
    """`Table("release", "commit", ..., whole=("release", "commit"))`, then add_row and print it
    with a console (rocmpatch.console.out.print(table)). Cells are strings (Rich markup) or Rich Text."""

    def __init__(self, *headers: str, whole: Iterable[str] = (), **options: Any) -> None:
        unknown = set(whole) - set(headers)
        if unknown:
            raise ValueError(f"whole names no column: {sorted(unknown)}")
        self.headers = headers
        self.whole = tuple(whole)  # in order of importance
        self.options = options
        self.rows: list[tuple[Any, ...]] = []

    def add_row(self, *cells: Any) -> None:
        self.rows.append(cells)

    def column_widths(self, width: int) -> list[int] | None:
        """Each column's width (padding aside) for a terminal `width` columns wide; None: as wide as
        their content (it fits); [] when not one `whole` column fits (print records instead)."""
        columns = range(len(self.headers))
        natural = [self._widest(i, str.splitlines) for i in columns]
        words = [self._widest(i, str.split) for i in columns]
        budget = width - _PADDING_AND_BORDER * len(self.headers) - 1
        if sum(natural) <= budget:
            return None
        if sum(words) <= budget:
            return _collapse(natural, words, budget)
        kept: list[int] = []
        for i in sorted((i for i in columns if self.headers[i] in self.whole), key=lambda i: self.whole.index(self.headers[i])):
            floors = [words[j] if j in (*kept, i) else min(words[j], _FOLDED_AT_LEAST) for j in columns]
            if sum(floors) <= budget:
                kept.append(i)
        if self.whole and not kept:
            return []
        return _collapse(natural, [words[i] if i in kept else 1 for i in columns], budget)

    def __rich_console__(self, console, options):
        from rich.table import Table as RichTable

        widths = self.column_widths(options.max_width)
        if widths == []:
            yield from self._records()
            return
        table = RichTable(**self.options)
        for header, width in zip(self.headers, widths or [None] * len(self.headers)):
            table.add_column(header, overflow="fold", width=width)
        for row in self.rows:
            table.add_row(*row)
        yield table

    def _records(self):
        """Each row as its first cell, then `  header: value` lines (continuation lines indented).
        A line longer than the terminal is left to it to wrap: a soft-wrapped line copies whole."""
        from rich.text import Text

        title = self.options.get("title")
        if title:
            yield _text(title)
        for row in self.rows:
            cells = [_text(cell) for cell in row]
            yield Text.assemble(cells[0] if cells else "")
            for header, cell in zip(self.headers[1:], cells[1:]):
                lead = f"  {header}: "
                lines = cell.split("\n") or [Text()]
                yield Text.assemble(lead, lines[0])
                for line in lines[1:]:
                    yield Text.assemble(" " * len(lead), line)

    def _widest(self, index: int, pieces) -> int:
        """The widest piece (line or word), in terminal cells, of a column's header and cells."""
        from rich.cells import cell_len

        texts = [self.headers[index]] + [_plain(row[index]) for row in self.rows if index < len(row)]
        return max((cell_len(piece) for text in texts for piece in pieces(text)), default=1)


def _collapse(widths: list[int], floors: list[int], budget: int) -> list[int]:
    """Narrow the widest column (above its floor) one cell at a time until the widths fit."""
    widths = list(widths)
    while sum(widths) > budget:
        shrinkable = [i for i, (w, f) in enumerate(zip(widths, floors)) if w > max(f, 1)]
        if not shrinkable:
            break
        widths[max(shrinkable, key=lambda i: (widths[i], -i))] -= 1
    return widths


def _text(cell: Any):
    from rich.text import Text

    if cell is None:
        return Text()
    if isinstance(cell, str):
        from rich.errors import MarkupError

        try:
            return Text.from_markup(cell)
        except MarkupError:
            return Text(cell)
    return cell if isinstance(cell, Text) else Text(str(cell))


def _plain(cell: Any) -> str:
    return _text(cell).plain
