"""The README and docs/: every link lands, every page is reachable, the picture is current.

Relative links in README.md and docs/*.md must name a file of this checkout, and an `#anchor`
into a Markdown file must name one of its headings (GitHub's slug). External http(s) links are
checked for their shape only (no network). docs/index.md lists every page of docs/, and every
page can be reached from README.md. docs/architecture.md's generated region is what
docs/architecture.py makes of the repo today; its module map names each module in its own
folder's row, by full path, and its tests/unit/ row says exactly which modules have a test at
the mirrored path.
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


# The packages the module map names module by module, and where their unit tests mirror them.
PACKAGES = {
    "operator/tfjob_operator": "tests/unit/operator",
    "trainer/tfjob_trainer": "tests/unit/trainer",
    "protocol/tfjob_protocol": "tests/unit/protocol",
    "testbed/tfjob_testbed": "tests/unit/testbed",
}
MAP_LABEL = 29  # the module map's first column: the folder a row is about
MAP_MODULE = re.compile(r"(?<![\w/.])\w+\.py\b")


def _module_map() -> list[tuple[str, str]]:
    """The module map's rows, as (folder, text): a top-level folder (`trainer/tfjob_trainer/`),
    or one inside the last top-level one, its path joined to it (`  rules/kueue/` under
    `operator/tfjob_operator/`); a row's text continues on the lines indented to the column."""
    page = (DOCS / "architecture.md").read_text()
    start = page.index("```\n", page.index("## Module map")) + 4
    block = page[start : page.index("\n```", start)]
    rows: list[tuple[str, list[str]]] = []
    top = ""
    for line in block.splitlines():
        label, text = line[:MAP_LABEL], line[MAP_LABEL:].strip()
        if not label.strip():
            rows[-1][1].append(text)
            continue
        folder = label.strip()
        if label.startswith("  "):
            folder = top + folder
        else:
            top = folder
        rows.append((folder, [text]))
    return [(folder, " ".join(parts)) for folder, parts in rows]


def _named_at_top(text: str) -> list[str]:
    """The modules a row names itself: file names outside parentheses (those describe), and
    not part of a longer path."""
    depth, outside = 0, []
    for c in text:
        depth += c == "("
        outside.append(c if depth == 0 else " ")
        depth -= c == ")" and depth > 0
    return MAP_MODULE.findall("".join(outside))


def _modules() -> list[str]:
    """Every module of the four packages, by its path in the repo (`__init__.py` aside)."""
    return [
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    ]


def _mirror(module: str) -> str:
    """Where a module's own unit test sits: `operator/tfjob_operator/rules/kueue/queue.py`'s is
    `tests/unit/operator/rules/kueue/test_queue.py`, a `__main__.py`'s `test_main.py`."""
    package = next(p for p in PACKAGES if module.startswith(p + "/"))
    folder, _, name = module[len(package) + 1 :].rpartition("/")
    test = "test_" + name.removesuffix(".py").strip("_") + ".py"
    return "/".join(x for x in (PACKAGES[package], folder, test) if x)


def test_module_map_names_every_module() -> None:
    """The module map in docs/architecture.md matches the tree, by full path: every module of
    the operator, the trainer, the protocol package and the test bed is named in the row of its
    own folder, and every module the map names exists there."""
    named = {
        f"{folder}{name}"
        for folder, text in _module_map()
        if any(folder.startswith(p + "/") for p in PACKAGES)
        for name in _named_at_top(text)
    }
    modules = set(_modules())
    assert not modules - named, (
        f"docs/architecture.md's module map does not name, in its folder's row: "
        f"{sorted(modules - named)}"
    )
    assert not named - modules, (
        f"docs/architecture.md's module map names no such module: {sorted(named - modules)}"
    )


def test_module_map_parser() -> None:
    assert _named_at_top("a.py (b.py, see data/c.py) · d.py: e/f.py") == ["a.py", "d.py"]
    assert _named_at_top("__main__.py (x (y.py)) · z.py") == ["__main__.py", "z.py"]
    assert _mirror("operator/tfjob_operator/rules/kueue/queue.py") == (
        "tests/unit/operator/rules/kueue/test_queue.py"
    )
    assert _mirror("trainer/tfjob_trainer/__main__.py") == "tests/unit/trainer/test_main.py"
    assert _mirror("protocol/tfjob_protocol/stop.py") == "tests/unit/protocol/test_stop.py"
    assert _mirror("testbed/tfjob_testbed/kind/parts.py") == "tests/unit/testbed/kind/test_parts.py"
    assert _mirror("testbed/tfjob_testbed/sandbox.py") == "tests/unit/testbed/test_sandbox.py"


def _unit_tests_row() -> str:
    return " ".join(text for folder, text in _module_map() if folder == "tests/unit/")


def test_unit_tests_mirror_the_modules_as_the_map_says() -> None:
    """The map's tests/unit/ row says where a module's own test sits (its path, mirrored), in
    which folders every module has one, and which tests are named for a scenario instead. Each
    claim is checked by full path, and the folders it lists are exactly those fully mirrored."""
    row = _unit_tests_row()
    listed = re.search(r"Every module has one in these folders \([^)]*\): (.+?)\. ", row)
    assert listed, "the tests/unit/ row no longer says in which folders every module has a test"
    claimed = {f.strip() for f in listed.group(1).split("·")}
    scenario = re.search(r"Tests named for a scenario, not a module: (.+)$", row)
    assert scenario, "the tests/unit/ row no longer names the tests named for a scenario"
    scenarios = {f"tests/unit/{t.strip()}" for t in scenario.group(1).split("·")}

    folders: dict[str, list[str]] = {}
    for module in _modules():
        test = _mirror(module)
        folders.setdefault(test.rpartition("/")[0].removeprefix("tests/unit/") + "/", []).append(
            test
        )
    mirrored = {f for f, tests in folders.items() if all((ROOT / t).is_file() for t in tests)}
    assert claimed <= set(folders), f"no such folder of modules: {sorted(claimed - set(folders))}"
    unmirrored = {t for f in claimed for t in folders[f] if not (ROOT / t).is_file()}
    assert not unmirrored, f"modules said to have a mirrored test lack it: {sorted(unmirrored)}"
    assert claimed == mirrored, (
        "docs/architecture.md's tests/unit/ row should list exactly the folders where every "
        f"module has its mirrored test: {sorted(mirrored)}"
    )

    # Every unit test of the packages is a module's, at its mirrored path, or named for a
    # scenario in the row.
    mirrors = {_mirror(m) for m in _modules()}
    tests = {
        path.relative_to(ROOT).as_posix()
        for where in PACKAGES.values()
        for path in (ROOT / where).rglob("test_*.py")
    }
    stray = tests - mirrors - scenarios
    assert not stray, (
        f"unit tests at no module's mirrored path, nor named as scenarios: {sorted(stray)}"
    )
    gone = scenarios - tests
    assert not gone, f"the tests/unit/ row names tests that do not exist: {sorted(gone)}"


WHERE_PATH = re.compile(
    r"`((?:operator|trainer|protocol|testbed|tests)/[\w/.]+\.py)`(?:: `(\w+)`)?"
)


def test_where_is_it_names_files_and_functions_that_exist() -> None:
    """docs/architecture.md's "Where is it" table: every file it names exists, and every
    function or class named after a file (`path`: `name`) is defined in that file."""
    page = (DOCS / "architecture.md").read_text()
    table = page[page.index("## Where is it") : page.index("## Module map")]
    found = WHERE_PATH.findall(table)
    assert len(found) >= 10, "the table names fewer files than it did"
    for path, name in found:
        assert (ROOT / path).is_file(), f"no such file: {path}"
        if name:
            source = (ROOT / path).read_text()
            assert re.search(rf"^\s*(?:async def|def|class) {name}\b", source, re.M), (
                f"{path} defines no {name}"
            )


def test_the_beds_readme_names_every_module_of_the_bed() -> None:
    """testbed/README.md's table has a row for every module of the bed, and no row for a file
    that is not there."""
    page = (ROOT / "testbed" / "README.md").read_text()
    rows = set(re.findall(r"^\| `([\w/.-]+)` \|", page, re.M))
    bed = ROOT / "testbed" / "tfjob_testbed"
    files = {
        p.relative_to(bed).as_posix()
        for p in bed.rglob("*")
        if p.suffix in (".py", ".sh") and p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    assert not files - rows, f"testbed/README.md has no row for: {sorted(files - rows)}"
    assert not rows - files, f"testbed/README.md has rows for no such file: {sorted(rows - files)}"
