"""A notebook view's HTML read back as structure, for tests that assert what a person
sees: titles, badges (pills), name/value tables, tables with their header and each
cell's text and alignment, notes, and the charts (SVG) with their text and the
tooltips of their bars."""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser


@dataclass
class Cell:
    text: str
    align: str          # "left" or "right", from the cell's inline style
    kind: str           # "th" or "td"
    pills: list[str] = field(default_factory=list)


@dataclass
class Table:
    header: list[str]
    rows: list[list[Cell]]

    def column(self, name: str) -> list[str]:
        i = self.header.index(name)
        return [r[i].text for r in self.rows if len(r) == len(self.header)]

    def aligns(self, name: str) -> set[str]:
        i = self.header.index(name)
        return {r[i].align for r in self.rows if len(r) == len(self.header)}

    def records(self) -> list[dict[str, str]]:
        return [{h: c.text for h, c in zip(self.header, r)} for r in self.rows
                if len(r) == len(self.header)]

    @property
    def gaps(self) -> list[str]:
        """Rows that span the table (rows left out)."""
        return [r[0].text for r in self.rows if len(r) == 1 and len(self.header) > 1]


@dataclass
class View:
    titles: list[str] = field(default_factory=list)
    pills: list[str] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)      # every name/value table
    tables: list[Table] = field(default_factory=list)         # tables with a header row
    notes: list[str] = field(default_factory=list)
    charts: list[str] = field(default_factory=list)           # each SVG's aria-label
    chart_text: list[list[str]] = field(default_factory=list)  # its <text> elements
    chart_tips: list[list[str]] = field(default_factory=list)  # its bars' tooltips
    text: str = ""                                            # everything, as text

    def table(self, first_header: str) -> Table:
        return next(t for t in self.tables if t.header and t.header[0] == first_header)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.view = View()
        self.open: list[tuple[str, dict[str, str], list[str]]] = []   # tag, attrs, text
        self.rows: list[list[Cell]] = []
        self.row: list[Cell] = []
        self.pills: list[str] = []
        self.svg: list[str] | None = None
        self.tips: list[str] = []
        self.all: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "br":
            self.handle_data("\n")
            return
        self.open.append((tag, a, []))
        if tag == "svg":
            self.svg = []
            self.tips = []
            self.view.charts.append(a.get("aria-label", ""))
        elif tag == "table":
            self.rows = []
        elif tag == "tr":
            self.row = []
        elif tag in ("td", "th"):
            self.pills = []

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            t, a, parts = self.open.pop()
            raw = "".join(parts)
            text = raw.strip() if "\n" in raw else " ".join(raw.split())
            if self.open:
                self.open[-1][2].append(raw)
            if t == tag:
                break
        else:
            return
        cls = a.get("class", "")
        if tag == "svg":
            assert self.svg is not None
            self.view.chart_text.append(self.svg)
            self.view.chart_tips.append(self.tips)
            self.svg = None
        elif tag == "text" and self.svg is not None:
            self.svg.append(text)
        elif tag == "span" and "pill" in cls.split():
            self.view.pills.append(text)
            self.pills.append(text)
        elif tag in ("td", "th"):
            align = "right" if "text-align:right" in a.get("style", "") else "left"
            self.row.append(Cell(text, align, tag, list(self.pills)))
        elif tag == "tr":
            self.rows.append(self.row)
        elif tag == "table":
            if self.rows and all([c.kind for c in r] == ["th", "td"] for r in self.rows):
                for r in self.rows:
                    self.view.fields[r[0].text] = r[1].text
            elif self.rows and all(c.kind == "th" for c in self.rows[0]):
                self.view.tables.append(Table([c.text for c in self.rows[0]], self.rows[1:]))
        elif tag == "div" and cls == "t":
            self.view.titles.append(text)
        elif tag == "div" and cls == "note" and text:
            self.view.notes.append(text)

    def handle_data(self, data: str) -> None:
        if self.open and self.open[-1][0] in ("style", "title"):
            if (self.svg is not None and len(self.open) > 1 and self.open[-1][0] == "title"
                    and self.open[-2][0] == "rect"):
                self.tips.append(data)       # a bar's tooltip
            return
        if self.open:
            self.open[-1][2].append(data)
        self.all.append(data)


def parse(html: str) -> View:
    """The view ``html`` shows."""
    p = _Parser()
    p.feed(html)
    p.close()
    p.view.text = " ".join("".join(p.all).split())
    return p.view
