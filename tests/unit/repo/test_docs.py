"""The README and docs/: every link lands, every page is reachable, the picture is current.

Relative links in README.md and docs/*.md must name a file of this checkout, and an `#anchor`
into a Markdown file must name one of its headings (GitHub's slug). External http(s) links are
checked for their shape only (no network). docs/index.md lists every page of docs/, and every
page can be reached from README.md. docs/architecture.md's generated region is what
docs/architecture.py makes of the repo today.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
INDEX = DOCS / "index.md"
README_MAX_LINES = 250

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target "title") and ![alt](target); the text may hold one level of brackets, the
# target one level of parentheses.
INLINE = re.compile(r"!?\[(?P<text>(?:[^\[\]]|\[[^\]]*\])*)\]\((?P<dest>(?:[^()]|\([^()]*\))*)\)")
DEST = re.compile(r"\s*(?P<target><[^>]*>|\S*)(?P<rest>.*?)\s*$")
TITLE = re.compile(r"\s+(\"[^\"]*\"|'[^']*'|\([^)]*\))")
REFERENCE_DEF = re.compile(r"^\s{0,3}\[(?P<label>[^\]]+)\]:\s*(?P<target><[^>]*>|\S+)")
REFERENCE_USE = re.compile(r"\[(?P<text>[^\[\]]+)\]\[(?P<label>[^\[\]]*)\]")
AUTOLINK = re.compile(r"<(?P<target>https?://[^>\s]+)>")
ATX = re.compile(r"^\s{0,3}(#{1,6})\s+(?P<text>.*?)(?:\s+#+)?\s*$")
SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*(?:name|id)=\"(?P<id>[^\"]+)\"", re.I)


@dataclass(frozen=True)
class Link:
    file: Path
    line: int
    target: str

    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}: ({self.target})"


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def _prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code, with inline code blanked out."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        out.append((n, CODE_SPAN.sub(lambda c: " " * len(c.group(0)), line)))
    return out


def links(page: Path) -> list[Link]:
    lines = _prose(page.read_text())
    refs = {}
    for _, line in lines:
        m = REFERENCE_DEF.match(line)
        if m:
            refs[m.group("label").lower()] = m.group("target")
    found = []
    for n, line in lines:
        if REFERENCE_DEF.match(line):
            found.append(Link(page, n, REFERENCE_DEF.match(line).group("target").strip("<>")))
            continue
        for m in INLINE.finditer(line):
            dest = DEST.match(m.group("dest"))
            assert dest
            target = dest.group("target").strip("<>")
            if dest.group("rest") and not TITLE.fullmatch(dest.group("rest")):
                target = f"[malformed: {m.group('dest').strip()}]"
            found.append(Link(page, n, target))
        for m in REFERENCE_USE.finditer(line):
            label = (m.group("label") or m.group("text")).lower()
            found.append(Link(page, n, refs.get(label, f"[undefined reference: {label}]")))
        for m in AUTOLINK.finditer(line):
            found.append(Link(page, n, m.group("target")))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the rendered text, lower case, punctuation dropped."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    previous = ""
    for _, line in _prose(page.read_text()):
        text = None
        m = ATX.match(line)
        if m:
            text = m.group("text")
        elif SETEXT.match(line) and previous.strip() and not ATX.match(previous):
            text = previous.strip()
        previous = line
        for a in HTML_ANCHOR.finditer(line):
            out.add(a.group("id"))
        if text is None:
            continue
        base = slug(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return frozenset(out)


def resolve(link: Link) -> tuple[Path | None, str, str | None]:
    """(the file a relative link names, its anchor, or an error); (None, "", None) if external."""
    if link.target.startswith("[malformed"):
        return None, "", link.target.strip("[]") + " (a space in the target?)"
    if link.target.startswith("[undefined reference"):
        return None, "", link.target.strip("[]")
    parts = urlsplit(link.target)
    if parts.scheme in ("http", "https"):
        host = parts.hostname or ""
        if ("." not in host and host != "localhost") or re.search(r"\s", link.target):
            return None, "", "malformed URL"
        return None, "", None
    if parts.scheme == "mailto":
        return None, "", None if "@" in parts.path else "malformed mailto"
    if parts.scheme or parts.netloc:
        return None, "", f"scheme {parts.scheme!r}: only relative links and http(s) are allowed"
    path = unquote(parts.path)
    if not path:
        target = link.file
    elif path.startswith("/"):
        target = ROOT / path.lstrip("/")
    else:
        target = link.file.parent / path
    target = target.resolve()
    if target != ROOT and ROOT not in target.parents:
        return None, "", "points outside the repository"
    if not target.exists():
        return None, "", f"no such file: {target.relative_to(ROOT)}"
    return target, unquote(parts.fragment), None


def all_links() -> list[Link]:
    return [link for page in pages() for link in links(page)]


def test_links_and_anchors_resolve() -> None:
    broken = []
    for link in all_links():
        target, anchor, error = resolve(link)
        if error:
            broken.append(f"{link.where()}: {error}")
        elif target is not None and anchor:
            if target.suffix.lower() != ".md":
                # GitHub's line anchors (#L10, #L10-L20) for code files.
                if not re.fullmatch(r"L\d+(-L\d+)?", anchor):
                    broken.append(f"{link.where()}: anchor #{anchor} in a file that has none")
            elif anchor not in anchors(target):
                near = sorted(anchors(target))
                broken.append(
                    f"{link.where()}: no heading with anchor #{anchor} in "
                    f"{target.relative_to(ROOT)} (it has: {', '.join(near)})"
                )
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_links_were_found() -> None:
    # The scanner itself: the README links into docs/, and docs/index.md into every page.
    assert any("docs/" in link.target for link in links(README))
    assert len(links(INDEX)) >= len(list(DOCS.glob("*.md"))) - 1


def _linked_pages(page: Path) -> set[Path]:
    out = set()
    for link in links(page):
        target, _, error = resolve(link)
        if target is not None and not error and target.suffix == ".md":
            out.add(target)
    return out


def test_index_lists_every_page() -> None:
    listed = _linked_pages(INDEX)
    missing = [p.relative_to(ROOT).as_posix() for p in sorted(DOCS.glob("*.md")) if p != INDEX]
    missing = [p for p in missing if ROOT / p not in listed]
    assert not missing, f"docs/index.md does not link to: {', '.join(missing)}"


def test_every_page_is_reachable_from_the_readme() -> None:
    seen, todo = {README}, [README]
    while todo:
        for page in _linked_pages(todo.pop()):
            if page not in seen and (page.parent == DOCS or page == README):
                seen.add(page)
                todo.append(page)
    lost = [p.relative_to(ROOT).as_posix() for p in pages() if p not in seen]
    assert not lost, f"not reachable from README.md by links: {', '.join(lost)}"


def test_readme_is_the_front_door() -> None:
    text = README.read_text()
    count = len(text.splitlines())
    assert count <= README_MAX_LINES, (
        f"README.md has {count} lines (at most {README_MAX_LINES}): move detail into docs/"
    )
    # The two commands for a fresh machine, and CI running exactly the README's test command.
    assert "make demo" in text and "make test" in text
    assert "make test is the test command" in text.replace("`", "")
    assert (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1] == "make test"


def test_slug_matches_github() -> None:
    assert slug("The suite's time") == "the-suites-time"
    assert slug("Why `Suspended`.") == "why-suspended"
    assert slug("A node that stops answering") == "a-node-that-stops-answering"
    assert slug("create_job & [Katib](x.md)") == "create_job--katib"


def _generator():
    spec = importlib.util.spec_from_file_location("docs_architecture", DOCS / "architecture.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_architecture_picture_is_current() -> None:
    generator = _generator()
    page = (DOCS / "architecture.md").read_text()
    assert generator.BEGIN in page and generator.END in page, "generated region markers missing"
    assert generator.render(page) == page, (
        "docs/architecture.md is out of date with the repo: run "
        "`.venv/bin/python docs/architecture.py` and commit the result"
    )


def test_module_map_names_every_module() -> None:
    """The module map in docs/architecture.md matches the tree: every module of the operator,
    the trainer and the protocol package is named in it, with its folder."""
    page = (DOCS / "architecture.md").read_text()
    start = page.index("## Module map")
    end = page.find("\n## ", start + 1)
    section = page[start : end if end != -1 else len(page)]
    unnamed = []
    for package in ("operator/tfjob_operator", "trainer/tfjob_trainer", "protocol/tfjob_protocol"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "__init__.py" or "__pycache__" in path.parts:
                continue
            folders = path.relative_to(ROOT / package).parts[:-1]
            if path.name not in section or any(f"{f}/" not in section for f in folders):
                unnamed.append(path.relative_to(ROOT).as_posix())
    assert not unnamed, f"docs/architecture.md's module map does not name: {unnamed}"
