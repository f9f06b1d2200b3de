"""MkDocs hooks: result tables rendered at build time from the JSON reports in docs/data/, and the
package's reST cross-reference roles rendered as code.

A page writes ``<!-- fxpool-table: zoo data/zoo-torchvision.json "Title" -->`` (or ``bench FILE``,
``runtimes FILE``) where a table belongs, and ``<!-- fxpool-caption: pools data/bench.json -->`` under a
figure of ``docs/figures/`` (``make figures`` draws them from the same files); the hook replaces the
marker with what :mod:`model_zoo_checks.tables` renders from that file, so the pages cannot drift from
the runs.
A marker naming a missing file fails the (strict) build.

The package's docstrings are Markdown with Google-style sections (mkdocs.yml configures mkdocstrings so),
but some still name objects the Sphinx way (``:func:`~fxpool.convert```); :func:`plain_roles` turns each
such role in a rendered page into the code it names (``~`` keeping the last name only), so no raw role
reaches the reader. ``tests/test_docs.py`` checks the built API page for any left.

:func:`label_cells` gives every table cell its column's name (``data-label``), which
``docs/stylesheets/extra.css`` shows beside the value where a narrow screen reflows the table into cards.
"""

from __future__ import annotations

import html as markup
import re
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from model_zoo_checks import tables  # noqa: E402 (after the path it needs)

# A marker on a line of its own; indented (inside a collapsible block), what it renders is indented alike.
MARKER = re.compile(r"^([ \t]*)<!-- fxpool-(table|caption): (.+?) -->", re.MULTILINE)
# A reST role as Markdown renders it: the role name, then the inline code of its target.
ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|mod|data|exc|obj|const):<code>(~?)([^<]+)</code>")


def render(marker: str, arguments: str) -> str:
    if marker == "caption":  # NAME FILE: the lines under a figure, from the data it was drawn from
        name, path = shlex.split(arguments)
        return tables.render("caption", ROOT / "docs" / path, name)
    kind, path, *rest = shlex.split(arguments)
    return tables.render(kind, ROOT / "docs" / path, *rest)


def indented(text: str, indent: str) -> str:
    return "\n".join(indent + line if line else line for line in text.splitlines())


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 (MkDocs' hook signature)
    return MARKER.sub(lambda match: indented(render(match.group(2), match.group(3)), match.group(1)), markdown)


def plain_roles(html: str) -> str:
    """``:class:<code>~fxpool.errors.X</code>`` -> ``<code>X</code>``; without ``~`` the whole dotted name."""
    return ROLE.sub(lambda match: f"<code>{match.group(2).rsplit('.', 1)[-1] if match.group(1) else match.group(2)}</code>", html)


TABLE = re.compile(r"<table>(.*?)</table>", re.DOTALL)
HEADER_CELL = re.compile(r"<th[^>]*>(.*?)</th>", re.DOTALL)
ROW = re.compile(r"<tr>(.*?)</tr>", re.DOTALL)
CELL = re.compile(r"<td(?=[\s>])")


def label_cells(html: str) -> str:
    """Each ``<td>`` of a plain table gets ``data-label``: its column's header, as text."""

    def label_table(table: re.Match[str]) -> str:
        names = [
            markup.escape(markup.unescape(re.sub(r"<[^>]+>", "", cell)).strip()) for cell in HEADER_CELL.findall(table.group(1))
        ]

        def label_row(row: re.Match[str]) -> str:
            columns = iter(names)
            return "<tr>" + CELL.sub(lambda _: f'<td data-label="{next(columns, "")}"', row.group(1)) + "</tr>"

        return "<table>" + ROW.sub(label_row, table.group(1)) + "</table>"

    return TABLE.sub(label_table, html)


def on_page_content(html: str, page, config, files) -> str:  # noqa: ANN001 (MkDocs' hook signature)
    html = label_cells(plain_roles(html))
    if page is not None and page.file.src_uri.startswith("results/zoo-"):  # docs/stylesheets/extra.css
        html = f'<div class="fxpool-zoo">{html}</div>'
    return html
