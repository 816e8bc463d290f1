"""The README and docs/ describe the system as it is: a short README, and no development history
(a development stop, an issue number, a commit of this repository, a date of a change) in the
README, the docs pages or the package's comments and docstrings. History lives in git and
CHANGELOG.md. Every repository file a page names exists, so a page cannot outlive a move."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README_MAX_LINES = 250

# What marks development history, in prose and in code comments alike.
HISTORY = {
    "a development stop": re.compile(r"\bstops? \d+\b(?!\s*(?:ms|s|seconds?|minutes?|%)\b)", re.IGNORECASE),
    "an issue number": re.compile(r"\bissues? (?:#\s*)?\d+|\bissue\s*#\s*\d+", re.IGNORECASE),
    "an issue reference": re.compile(r"(?<![\w&/#\"'=])#\d+\b(?![0-9a-f])"),
}
# In prose only: a commit of this repository or a date (what changed when belongs in CHANGELOG.md).
PROSE_HISTORY = {
    "a commit": re.compile(r"\b(?=[0-9a-f]{7,12}\b)(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,12}\b"),
    "a date": re.compile(r"\b20\d\d-(?:0[1-9]|1[0-2])(?:-\d\d)?\b"),
}
# (file relative to the repository, exact text) -> why it is not this project's history. Prefer a
# link to the external thread over an entry here.
ALLOWED: dict[tuple[str, str], str] = {}


def _docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _hits(text: str, rel: str, patterns: dict[str, re.Pattern[str]], first_line: int = 1) -> list[str]:
    found: list[str] = []
    taken: set[int] = set()
    for what, pattern in patterns.items():
        for match in pattern.finditer(text):
            if taken & set(range(*match.span())):
                continue  # "issue #24" is one mention, not an issue number and a reference
            taken |= set(range(*match.span()))
            line = first_line + text.count("\n", 0, match.start())
            context = text[max(0, match.start() - 30) : match.end() + 30].replace("\n", " ")
            if any(rel == f and snippet in context for f, snippet in ALLOWED):
                continue
            found.append(f"{rel}:{line}: {what} ({match.group(0)!r} in ...{context}...)")
    return found


def _prose_history(path: Path) -> list[str]:
    rel = str(path.relative_to(REPO))
    text = path.read_text()
    return _hits(text, rel, {**HISTORY, **PROSE_HISTORY})


def test_readme_is_short():
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move reference material to docs/"


def test_the_readme_keeps_the_ci_sentence():
    # .ci/run runs exactly the README's test command; the README says so, and both must agree.
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in ci and "bash scripts/test.sh" in readme
    assert "exactly what `.ci/run` runs" in readme


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, id=str(p.relative_to(REPO))) for p in _docs()],
)
def test_page_has_no_development_history(page: Path):
    hits = _prose_history(page)
    assert not hits, "development history in the docs (move it to CHANGELOG.md):\n" + "\n".join(hits)


def _comments_and_docstrings(path: Path) -> list[tuple[int, str]]:
    source = path.read_text()
    out = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            out.append((token.start[0], token.string.lstrip("#")))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                out.append((body[0].lineno, body[0].value.value))
    return out


def test_the_history_patterns_catch_what_they_are_for():
    # The checks above pass vacuously if the patterns match nothing: each must catch its kind.
    history = {**HISTORY, **PROSE_HISTORY}
    for text, what in [
        ("Before stop 37, every row was read", "a development stop"),
        ("the size issue #24 names", "an issue number"),
        ("(issue 21, item 3)", "an issue number"),
        ("Where the time went (#24)", "an issue reference"),
        ("the old tree (487d789) then the new", "a commit"),
        ("until 2026-12-02 they were held", "a date"),
    ]:
        assert history[what].search(text), (what, text)
    for text in ["it stops in 0.22 s", "stop 10 s after", 'fill="#111827"', "sha256 and 64-bit hashes", "128 MB shards"]:
        assert not any(p.search(text) for p in history.values()), text


def test_package_comments_have_no_development_history():
    hits = []
    for path in sorted((REPO / "prx_data").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for line, text in _comments_and_docstrings(path):
            hits += _hits(text, rel, HISTORY, first_line=line)
    assert not hits, "development history in comments or docstrings (git log and CHANGELOG.md hold it):\n" + "\n".join(hits)


# A repository path named in a page: a folder of the repository followed by a file or folder name.
CITED_PATH = re.compile(r"(?<![\w./-])((?:prx_data_tests|prx_data|benchmarks|scripts|deployments)/[\w./-]*[\w/])")


def test_pages_name_files_that_exist():
    missing = []
    for page in _docs():
        rel = str(page.relative_to(REPO))
        for match in CITED_PATH.finditer(page.read_text()):
            cited = match.group(1).split("::")[0]
            if not (REPO / cited).exists():
                missing.append(f"{rel} names {cited}")
    assert not missing, "pages name files that are not in the repository:\n" + "\n".join(missing)


LINK = re.compile(r"\]\(([\w./-]*\.md)?(?:#([\w-]+))?\)")


def _anchors(page: Path) -> set[str]:
    # GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens.
    heads = re.findall(r"^#+ (.+)$", page.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_links_between_pages_resolve():
    broken = []
    for page in _docs():
        rel = str(page.relative_to(REPO))
        for target, anchor in LINK.findall(page.read_text()):
            if not target and not anchor:
                continue
            linked = (page.parent / target).resolve() if target else page
            if not linked.is_file():
                broken.append(f"{rel} links to {target}, which does not exist")
            elif anchor and anchor not in _anchors(linked):
                broken.append(f"{rel} links to {target}#{anchor}, a heading {target or rel} does not have")
    assert not broken, "\n".join(broken)
