"""The dependency arrows run one way: sim imports neither hw nor dashboard (docs/design.md,
"The shape"), read from the source, so that a lazy import inside a function counts too."""

import ast
import pathlib

import sim

SIM = pathlib.Path(sim.__file__).parent


def imported_packages(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


def test_sim_imports_neither_hw_nor_dashboard():
    files = sorted(SIM.rglob("*.py"))
    assert len(files) > 10
    offenders = {str(p.relative_to(SIM)): imported_packages(p) & {"hw", "dashboard", "torch", "dash"}
                 for p in files}
    assert {k: v for k, v in offenders.items() if v} == {}
