"""Every code block of the README and of docs/ runs as written, and the site reads well.

Python blocks run in a fresh folder (they write their .onnx files there); shell blocks run each command:
``fxpool ...`` through the command line, ``make TARGET`` as a dry run (``make -n``) that must name a real
target, ``pip install SPEC`` by checking that each extra it names exists (nothing is installed). ``text``
blocks are output, not code.

The site: the API page documents ``fxpool.__all__`` and nothing else, with no raw reST role and its
doctest as code; the results pages open with their figure (drawn from the data beside it) and lead with a
table of at most six columns, and the zoo pages hold no wider table at all. What is published (the pages,
the README, the data they render) names no path of the machine that made it, no commit and nothing of how
the work is organised. The API checks build the site with MkDocs (strict) into a temporary folder where
MkDocs is installed (the docs extra); where a Chromium is installed too, every page is measured in it
(``tests/pagefit.py``): nothing scrolls sideways at 1280 px or at 390 px.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from pagefit import find_chromium, measure_site, overflow_counts

import fxpool

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, as a package
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks() -> list[tuple[str, int, str, str]]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            language, code = match.group(1), match.group(2)
            if language in ("python", "bash"):
                line = text[: match.start()].count("\n") + 1
                found.append((str(page.relative_to(ROOT)), line, language, code))
    return found


BLOCKS = blocks()


def test_the_pages_have_code_to_run() -> None:
    assert {page for page, *_ in BLOCKS} >= {"README.md", "docs/guide.md", "docs/cli.md"}


@pytest.mark.parametrize("page,line,language,code", BLOCKS, ids=[f"{p}:{n}" for p, n, *_ in BLOCKS])
def test_every_code_block_runs_as_written(page: str, line: int, language: str, code: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if language == "python":
        run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"{page}:{line}\n{run.stderr[-3000:]}"
        return
    for command in (c for c in code.replace("\\\n", " ").splitlines() if c.strip() and not c.startswith("#")):
        words = shlex.split(command, comments=True)
        if words[:2] == ["pip", "install"]:
            extras = {e.strip() for spec in words[2:] for e in re.findall(r"\[([^\]]*)\]", spec) for e in e.split(",")}
            declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
            assert extras <= set(declared), f"{page}:{line}: {command} names extras pyproject.toml lacks: {extras - set(declared)}"
            continue
        if words[0] == "make":
            run = subprocess.run(["make", "-n", *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
        elif words[0] == "fxpool":
            run = subprocess.run(
                [sys.executable, "-m", "fxpool.cli", *words[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
            )
        else:
            pytest.fail(f"{page}:{line}: a shell command this test does not know how to run: {command}")
        assert run.returncode == 0, f"{page}:{line}: {command}\n{run.stdout[-1500:]}{run.stderr[-3000:]}"


def test_the_readme_and_the_home_page_open_with_installation() -> None:
    for page in ("README.md", "docs/index.md"):
        text = (ROOT / page).read_text()
        headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
        assert headings[0] == "Install", (page, headings)
        install = text.split("## Install", 1)[1]
        assert install.index("pip install .") < install.index("make zoo") < install.index("make test")
        assert '".[onnx]"' in install


# --- the site --------------------------------------------------------------------------------------------

sys.path.insert(0, str(ROOT / "docs"))
import hooks  # noqa: E402 (docs/hooks.py: the tables and the role rendering the build uses)

RESULTS = sorted((ROOT / "docs" / "results").glob("*.md"))
TABLE_ROW = re.compile(r"^\s*\|(.+)\|\s*$")
MAX_COLUMNS = 6  # what reads at 1280 px beside MkDocs Material's navigation


def tables_of(markdown: str) -> list[tuple[int, bool]]:
    """(columns, inside a collapsible block) of each Markdown table, by its header row."""
    found, previous, collapsible = [], "", False
    for line in markdown.splitlines():
        if line.startswith("??? ") or line.startswith("???+ "):
            collapsible = True
        elif line and not line.startswith(" ") and not line.startswith("|"):
            collapsible = False
        if re.match(r"^\s*\|(\s*:?-+:?\s*\|)+\s*$", line) and TABLE_ROW.match(previous):
            found.append((len(TABLE_ROW.match(previous).group(1).split("|")), collapsible))
        previous = line
    return found


@pytest.mark.parametrize("page", RESULTS, ids=[p.name for p in RESULTS])
def test_a_results_page_leads_with_a_compact_table(page: Path) -> None:
    markdown = hooks.on_page_markdown(page.read_text(), None, None, None)
    tables = tables_of(markdown)
    if not tables:
        pytest.skip(f"{page.name} renders no table (nothing measured yet)")
    assert tables[0][0] <= MAX_COLUMNS, f"{page.name} leads with a {tables[0][0]}-column table"
    if page.name.startswith("zoo-"):
        wide = [columns for columns, _ in tables if columns > MAX_COLUMNS]
        assert not wide, f"{page.name} has tables of {wide} columns"
        assert any(inside for _, inside in tables), f"{page.name}: the per-case table is not in a collapsible block"


def test_the_table_checker_sees_a_wide_table() -> None:
    assert tables_of("| a | b |\n|---|---|\n| 1 | 2 |\n") == [(2, False)]
    wide = "| " + " | ".join("abcdefgh") + " |\n" + "|---" * 8 + "|\n"
    assert tables_of('??? note "x"\n\n    ' + wide.replace("\n", "\n    ")) == [(8, True)]


def test_reST_roles_render_as_code() -> None:
    html = "see :func:<code>~fxpool.convert</code> and :class:<code>fxpool.errors.FxpoolError</code>"
    assert hooks.plain_roles(html) == "see <code>convert</code> and <code>fxpool.errors.FxpoolError</code>"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("MkDocs is not installed (the docs extra)")
    out = tmp_path_factory.mktemp("site")
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return out


def test_api_page_documents_the_public_api_only(site: Path) -> None:
    listed = re.findall(r"^::: fxpool\.(?:convert\.)?(\w+)$", (ROOT / "docs" / "api.md").read_text(), re.MULTILINE)
    assert sorted(listed) == sorted(fxpool.__all__)
    html = (site / "api" / "index.html").read_text()
    headings = set(re.findall(r'<h3 id="([\w.]+)"', html))
    public = {f"fxpool.{name}" for name in fxpool.__all__} | {"fxpool.convert.convert"}
    assert headings and headings <= public, sorted(headings - public)
    assert "enforce_strict" not in html and "_convert" not in html


def test_api_page_has_no_raw_roles_and_its_doctest_is_code(site: Path) -> None:
    html = (site / "api" / "index.html").read_text()
    text = re.sub(r"<[^>]+>", "", html)
    raw = re.findall(r":(?:func|class|meth|attr|mod|data|exc):`?\S+", text)
    assert not raw, raw[:5]
    assert "&gt;&gt;&gt;" in html and not re.search(r"<p>&gt;&gt;&gt;", html)  # in a code block, not a paragraph
    assert re.search(r'<div class="highlight"><pre><span></span><code><span class="gp">&gt;&gt;&gt; ', html)


def test_no_page_links_to_a_placeholder_address(site: Path) -> None:
    for page in site.rglob("*.html"):
        assert "example.invalid" not in page.read_text(), page


# --- what is published names no machine, commit or team --------------------------------------------------

PUBLISHED = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docs" / "data").glob("*.json"))]
# An absolute path on the machine that built or ran something, or an installed package's file by its path.
MACHINE_PATH = re.compile(
    r"(?<![\w.:/~-])(?:/(?:home|work|root|tmp|Users|mnt|srv|opt|usr|var|private)/|[A-Za-z]:\\\\)[^\s\"'`)]*"
    r"|[^\s\"'`(]*[/\\](?:site|dist)-packages[/\\][^\s\"'`)]*"
)
COMMIT = re.compile(r"(?<![\w.])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w.]|[-+]\d)")
TEAM_WORDS = re.compile(
    r"\b(?:lent|milestones?|(?:this|next|a later|another) session|sessions? with a|issues? #?\d+|issue-\d+|the lead"
    r"|engineers?|sprint|tickets?|commit(?:s|ted)? [0-9a-f]{7})\b",
    re.IGNORECASE,
)
# Pages whose run descriptions still name commits; they are rewritten with the zoo's figure.
NAMES_COMMITS: dict[str, str] = {}  # pages allowed to fail the check below, each with why (none)


def strings_of(value: object) -> list[str]:
    """Every string of a JSON value, keys included: what a report shows a reader (not its numbers)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [text for key, item in value.items() for text in (key, *strings_of(item))]
    if isinstance(value, list):
        return [text for item in value for text in strings_of(item)]
    return []


def published_text(path: Path) -> str:
    return "\n".join(strings_of(json.loads(path.read_text()))) if path.suffix == ".json" else path.read_text()


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=pytest.mark.xfail(reason=NAMES_COMMITS[str(p.relative_to(ROOT))], strict=True))
        if str(p.relative_to(ROOT)) in NAMES_COMMITS
        else p
        for p in PUBLISHED
    ],
    ids=[str(p.relative_to(ROOT)) for p in PUBLISHED],
)
def test_nothing_published_names_a_machine_path_a_commit_or_the_team(path: Path) -> None:
    text = published_text(path)
    for what, pattern in (("a machine's path", MACHINE_PATH), ("a commit", COMMIT), ("words for the team", TEAM_WORDS)):
        found = [text[max(0, m.start() - 30) : m.end() + 10] for m in pattern.finditer(text)]
        assert not found, f"{path.relative_to(ROOT)} names {what}: {found[:3]}"


def test_the_published_checks_catch_what_they_look_for() -> None:
    assert MACHINE_PATH.search("Failed: /work/main/.venv/lib/python3.11/site-packages/torch/nn/modules/pooling.py:1554")
    assert MACHINE_PATH.search(r"at C:\\Users\\me\\model.py") and MACHINE_PATH.search("lib/site-packages/torch/x.py")
    assert not MACHINE_PATH.search("see https://pytorch.org/docs/stable/onnx.html, .venv-runtimes and torch/nn/modules")
    assert COMMIT.search("On 2026-12-06 (commit 04eae7c, after the window sums)")
    assert not COMMIT.search("error 1.1502889911761644e-05, 10->7, deadbeef, 2026-12-06, 1000000")
    assert TEAM_WORDS.search("no GPU has been lent to this project") and TEAM_WORDS.search("a session with a GPU")
    assert not TEAM_WORDS.search("onnxruntime sessions timed side by side; the next one's run")
    data = {"rows": [{"reason": "ValueError at /tmp/x/y.py"}], "error": 1.1502889911761644e-05}
    assert strings_of(data) == ["rows", "reason", "ValueError at /tmp/x/y.py", "error"]


# --- figures ---------------------------------------------------------------------------------------------

# Each results page with data opens with its figure (docs/figures/, drawn by make figures from the file
# named by the caption marker under it); the zoo pages' figure is drawn by make zoo.
FIGURE_PAGES = {"benchmarks.md": "bench-pools", "index.md": "bench-convert", "runtimes.md": "runtimes"}
OPENING = re.compile(
    r"\A# [^\n]+\n\n\[!\[[^\]]+\]\(\.\./figures/([\w-]+)\.svg\)\]\(\.\./figures/\1\.svg\)\n\n<!-- fxpool-caption: (\w+) (\S+) -->\n"
)


@pytest.mark.parametrize("page,figure", FIGURE_PAGES.items())
def test_a_results_page_opens_with_its_figure_and_the_lines_on_what_it_shows(page: str, figure: str) -> None:
    text = (ROOT / "docs" / "results" / page).read_text()
    opening = OPENING.match(text)
    assert opening, f"{page} does not open with a figure of docs/figures/ and its caption marker"
    assert opening.group(1) == figure and (ROOT / "docs" / "figures" / f"{figure}.svg").is_file()
    caption = hooks.render("caption", f"{opening.group(2)} {opening.group(3)}")
    assert caption.count("  \n") == 2, caption  # three lines
    after = text[opening.end() :].lstrip("\n")
    assert after.startswith("??? note") or after.startswith("Every figure"), f"{page}: the method does not follow, folded"


def test_every_benchmark_section_of_the_data_shows_on_the_benchmarks_page() -> None:
    from model_zoo_checks.tables import BENCH_SECTIONS

    data = json.loads((ROOT / "docs" / "data" / "bench.json").read_text())
    page = (ROOT / "docs" / "results" / "benchmarks.md").read_text()
    shown = {s for marker in re.findall(r"fxpool-table: bench data/bench.json ([\w ]*) -->", page) for s in marker.split()}
    measured = {"runtime" if key == "pools" else key for key in data if key in BENCH_SECTIONS} | (
        {"pools"} if "pools" in data else set()
    )
    assert measured <= shown, f"sections measured but not on the page: {sorted(measured - shown)}"


# --- the site in a real browser --------------------------------------------------------------------------

WIDTHS = (1280, 390)  # a laptop's window; a phone's


def test_no_page_scrolls_sideways_and_no_table_code_or_signature_overflows(site: Path) -> None:
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium installed (apt-get install chromium), so no browser to measure the pages in")
    results = measure_site(site, WIDTHS, chromium)
    assert len(results) >= 18, sorted(results)
    overflowing = [
        f"{page or '/'} at {width} px: {found['page']} px sideways; "
        + "; ".join(f"{o['kind']} hides {o['hidden']} px ({o['text']})" for o in found["overflows"])
        for page, widths in results.items()
        for width, found in widths.items()
        if found["page"] > 0 or found["overflows"]
    ]
    assert not overflowing, f"{overflow_counts(results)}\n" + "\n".join(overflowing)
