"""Write the architecture picture into docs/architecture.md, derived from the repo itself.

    .venv/bin/python docs/architecture.py            # rewrite the generated region
    .venv/bin/python docs/architecture.py --check    # exit 1 if the page is out of date

Nothing in the picture is typed by hand: the packages and their folders, their layers
(pyproject.toml's `[[tool.importlinter.contracts]]`), which package imports which (every
`import` in the sources, read with `ast`), who starts whom (`-m package` in the sources, the
Dockerfile's ENTRYPOINTs), what the operator may touch in Kubernetes (`tfjob_operator.api.rbac`)
and the test bed's Go modules (`testbed/go/*/go.mod`). tests/unit/repo/test_docs.py regenerates
the region and fails when the committed page differs. Standard library only, no network.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- BEGIN GENERATED: docs/architecture.py -->"
END = "<!-- END GENERATED: docs/architecture.py -->"
# Libraries that talk to the Kubernetes API: importing one is an arrow to it.
KUBE_CLIENTS = ("kopf", "kubernetes")
SKIP_DIRS = {".venv", ".git", "node_modules", "__pycache__"}


def _importlinter() -> dict:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]


def contracts() -> list[dict]:
    return list(_importlinter()["contracts"])


def _root_packages() -> list[str]:
    return list(_importlinter()["root_packages"])


def packages() -> dict[str, Path]:
    """First-party top-level packages, each with its folder: import-linter's roots and every
    package of this checkout a contract names (the test bed)."""
    names = set(_root_packages())
    for c in contracts():
        for key in ("modules", "source_modules", "forbidden_modules", "containers"):
            names.update(m.split(".")[0] for m in c.get(key, []))
    found = {}
    for name in sorted(names):
        hits = sorted(
            p.parent
            for p in ROOT.glob(f"*/{name}/__init__.py")
            if not SKIP_DIRS & set(p.relative_to(ROOT).parts)
        )
        if hits:
            found[name] = hits[0]
    return found


def _members(path: Path) -> set[str]:
    """A package's modules and subpackages."""
    mods = {p.stem for p in path.glob("*.py") if p.name != "__init__.py"}
    return mods | {p.parent.name for p in path.glob("*/__init__.py")}


def _split(layer: str) -> list[str]:
    return [m.strip() for m in layer.split("|")]


@dataclass
class Repo:
    pkgs: dict[str, Path]
    # package -> its layers (a layers contract whose container is the package itself)
    layers: dict[str, list[list[str]]] = field(default_factory=dict)
    # "package.member" -> the layers of each contract on a package inside that member
    inner: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def read(cls) -> Repo:
        repo = cls(packages())
        for c in contracts():
            if c["type"] != "layers":
                continue
            for container in c.get("containers", []):
                parts = container.split(".")
                if parts[0] not in repo.pkgs:
                    continue
                if len(parts) == 1:
                    layers = [_split(layer) for layer in c["layers"]]
                    members = {m for layer in layers for m in layer}
                    unknown = members - _members(repo.pkgs[container])
                    if unknown:
                        raise SystemExit(f"{c['name']!r}: no such module in {container}: {unknown}")
                    repo.layers[container] = layers
                elif len(parts) > 2:
                    rows = [" · ".join(_split(layer)) for layer in c["layers"]]
                    where = "/".join(parts[2:])
                    repo.inner.setdefault(".".join(parts[:2]), []).extend(
                        [f"{where}/, top to bottom:", *rows]
                    )
        return repo

    def unit(self, module: str) -> str | None:
        """The box a module is drawn in: its layer member, else its package."""
        parts = module.split(".")
        if parts[0] not in self.pkgs:
            return None
        members = {m for layer in self.layers.get(parts[0], []) for m in layer}
        if len(parts) > 1 and parts[1] in members:
            return f"{parts[0]}.{parts[1]}"
        return parts[0]

    def module_of(self, file: Path) -> str:
        for path in self.pkgs.values():
            if path in file.parents:
                return ".".join(file.relative_to(path.parent).with_suffix("").parts)
        raise ValueError(file)

    def run_target(self, module: str) -> str | None:
        """The box `python -m module` runs: a package runs its __main__, and a __main__ outside
        the layers runs the one layer member it imports (`tfjob_operator` its controller)."""
        path = self.pkgs.get(module.split(".")[0])
        if not path:
            return None
        main = path.parent / module.replace(".", "/") / "__main__.py"
        if not main.exists():
            return self.unit(module)
        unit = self.unit(f"{module}.__main__")
        if unit in self.layers:
            imported = {
                self.unit(f"{n.module}.{a.name}")
                for n in ast.walk(ast.parse(main.read_text()))
                if isinstance(n, ast.ImportFrom) and n.module and not n.level
                for a in n.names
            } - {None, unit}
            if len(imported) == 1:
                return imported.pop()
        return unit


@dataclass
class Edges:
    imports: set[tuple[str, str]] = field(default_factory=set)
    starts: set[tuple[str, str]] = field(default_factory=set)
    clients: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    mentions: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))


def scan(repo: Repo) -> Edges:
    """Imports between packages, `-m` starts, Kubernetes clients, string constants."""
    edges = Edges()
    files = sorted(
        f for p in repo.pkgs.values() for f in p.rglob("*.py") if "__pycache__" not in f.parts
    )
    for file in files:
        module = repo.module_of(file)
        src = repo.unit(module)
        assert src
        tree = ast.parse(file.read_text(), filename=str(file))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".")
                    keep = len(anchor) - node.level + (file.name == "__init__.py")
                    base = ".".join([*anchor[:keep], base] if base else anchor[:keep])
                targets = [f"{base}.{a.name}" for a in node.names]
            elif isinstance(node, ast.List | ast.Tuple):
                values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
                for flag, name in pairwise(values):
                    if flag == "-m" and isinstance(name, str):
                        dst = repo.run_target(name)
                        if dst and dst.split(".")[0] != src.split(".")[0]:
                            edges.starts.add((src, dst))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                edges.mentions[src].add(node.value)
            for target in targets:
                if target.split(".")[0] in KUBE_CLIENTS:
                    edges.clients[src].add(target.split(".")[0])
                dst = repo.unit(target)
                if dst and dst.split(".")[0] != src.split(".")[0]:
                    edges.imports.add((src, dst))
    return edges


def images() -> list[tuple[str, str]]:
    """(stage, module) for each Dockerfile stage whose ENTRYPOINT is `python -m module`."""
    out, stage = [], None
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        m = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.I)
        if m:
            stage = m.group(1)
        m = re.match(r'ENTRYPOINT\s+\[.*"-m",\s*"([\w.]+)"\]', line)
        if m and stage:
            out.append((stage, m.group(1)))
    return sorted(out)


def api_access() -> list[str]:
    """One line per set of API groups granted the same resources, from api/rbac.py."""
    sys.path.insert(0, str(ROOT / "operator"))
    from tfjob_operator.api import rbac, spec

    by_group: dict[str, set[str]] = defaultdict(set)
    for rule in [r for g in spec.GROUPS for r in rbac.rules(g, kueue=True)] + rbac.LEASE_RULES:
        for group in rule["apiGroups"]:
            by_group[group or "core"].update(rule["resources"])
    by_resources: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for group, resources in by_group.items():
        by_resources[tuple(sorted(resources))].append(group)
    return sorted(f"{', '.join(sorted(g))}: {', '.join(r)}" for r, g in by_resources.items())


def go_modules() -> list[str]:
    out = []
    for mod in sorted((ROOT / "testbed" / "go").glob("*/go.mod")):
        m = re.search(r"^require\s+(\S+)\s+(v\S+)\s*$", mod.read_text(), re.M)
        if m:
            out.append(f"{mod.parent.name}: {m.group(1)} {m.group(2)}")
    return out


def _id(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _label(*lines: str) -> str:
    return '["' + "<br/>".join(s.replace('"', "#quot;") for s in lines) + '"]'


def mermaid() -> list[str]:
    repo = Repo.read()
    edges = scan(repo)
    where = {n: p.parent.relative_to(ROOT).as_posix() + "/" for n, p in repo.pkgs.items()}
    out = ["```mermaid", "flowchart TB"]
    chains = []
    for name in repo.pkgs:
        if name not in repo.layers:
            out.append(f"  {_id(name)}{_label(name, where[name])}")
            continue
        out.append(f'  subgraph {_id(name)}["{name} · {where[name]}"]')
        out.append("    direction TB")
        for i, layer in enumerate(repo.layers[name], 1):
            out.append(f'    subgraph {_id(name)}_layer{i}["layer {i}: {" · ".join(layer)}"]')
            for member in layer:
                unit = f"{name}.{member}"
                out.append(f"      {_id(unit)}{_label(member, *repo.inner.get(unit, []))}")
            out.append("    end")
            if i > 1:
                chains.append(f"  {_id(name)}_layer{i - 1} --> {_id(name)}_layer{i}")
        out.append("  end")
    out.append(f"  kube{_label('Kubernetes API, as api/rbac.py grants it', *api_access())}")
    for stage, module in images():
        out.append(f"  image_{_id(stage)}{_label(f'{stage} image', f'python -m {module}')}")
    gomods = go_modules()
    if gomods:
        out.append(f"  gomods{_label('testbed/go: Go modules the test bed builds', *gomods)}")

    arrows = list(chains)
    arrows += [f"  {_id(a)} -->|imports| {_id(b)}" for a, b in sorted(edges.imports)]
    arrows += [
        f"  {_id(a)} -->|{' + '.join(sorted(libs))}| kube"
        for a, libs in sorted(edges.clients.items())
    ]
    arrows += [f"  {_id(a)} -.->|starts| {_id(b)}" for a, b in sorted(edges.starts)]
    for stage, module in images():
        arrows.append(f"  image_{_id(stage)} -.->|runs| {_id(repo.run_target(module) or module)}")
    for src, strings in sorted(edges.mentions.items()):
        if "Dockerfile" in strings:
            arrows += [f"  {_id(src)} -.->|builds| image_{_id(stage)}" for stage, _ in images()]
    if gomods and "tfjob_testbed" in repo.pkgs:
        arrows.append("  tfjob_testbed -.->|builds| gomods")
    return [*out, *arrows, "```"]


def region() -> str:
    return "\n".join(
        [
            BEGIN,
            "",
            "Generated from the repo by `.venv/bin/python docs/architecture.py`; do not edit",
            "by hand: run it again after a change, and `tests/unit/repo/test_docs.py` fails until",
            "you do. A package with a layers contract is drawn as its layers, top to bottom:",
            "each layer may import those below it, never those above. Solid arrows are imports",
            "from one package into another (and Kubernetes clients); dotted ones are processes",
            "started (`-m`), what each image runs, and what the test bed builds.",
            "",
            *mermaid(),
            "",
            "The import contracts `make lint` holds (`[[tool.importlinter.contracts]]` in",
            "`pyproject.toml`):",
            "",
            *[f"- {c['name']} ({c['type']})" for c in contracts()],
            "",
            END,
        ]
    )


def render(page: str) -> str:
    start, end = page.index(BEGIN), page.index(END) + len(END)
    return page[:start] + region() + page[end:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args()
    page = PAGE.read_text()
    new = render(page)
    if args.check:
        if new != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run .venv/bin/python docs/architecture.py")
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
