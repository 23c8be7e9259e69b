"""Nothing outside a scheme's module names it (docs/adding-a-scheme.md): in sim/ and
dashboard/, a scheme's name is a string only in its own module (sim/schemes/<name>.py)
and in the registry (sim/schemes/__init__.py). Everything else asks the registry and the
scheme (its settings, options, variants, candidates and words).

Two exceptions, decided here:
- the default scheme's name, "ring", is also the word for a ring of GPUs (its step, its
  degree, its colour): it is checked only where it stands for a scheme (a `scheme=`
  keyword, a field or argument named for a scheme, a comparison with one, a `"scheme"`
  key's value or a `.get("scheme", ...)` default); code that means the default scheme
  says `sim.schemes.DEFAULT`;
- NCCL's collective "allgather" (a calibrated profile's key, next to "reducescatter" and
  "alltoall") is not the scheme: EXEMPT lists where it stands.
hw/ is not checked: it holds a real kernel per scheme (hw/ring.py, hw/allgather.py,
hw/ulysses.py) and its own table of them (hw/kernels.py), the kernels' side that sim/
cannot own (sim/ imports nothing of hw/). The dashboard's message catalogs (locale/*.po)
are data: a message looked up by a scheme's own name (run.<scheme>, opt.scheme.<scheme>)
is the scheme's entry there.
"""

from __future__ import annotations

import ast
import os

import pytest

from sim.schemes import DEFAULT, names

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CHECKED = ("sim", "dashboard")
EXEMPT = {
    ("sim/calibration/calibrate.py", "allgather"): "NCCL's collective, a profile's key",
    ("sim/hardware/profile.py", "allgather"): "NCCL's collective, a profile's key",
    ("sim/profiler/kernels.py", "allgather"): "the collective's name in a profiler trace's comm args",
    ("sim/profiler/ring.py", "allgather"): "how a profiled ring's blocks travelled (torch's rotation)",
    ("dashboard/views/traces.py", "allgather"): "the words for how a profiled ring's blocks travelled",
    ("sim/inference/work.py", "allgather"): "the inference prefill's own scheme (K/V gathered once), not sim.schemes'",
}


def _modules() -> list[str]:
    out = []
    for top in CHECKED:
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            out += [os.path.relpath(os.path.join(folder, f), ROOT) for f in files if f.endswith(".py")]
    return sorted(out)


def _is_schemeish(node: ast.AST) -> bool:
    """Whether an expression stands for a scheme by its name: `scheme`, `x.scheme`,
    `cfg["scheme"]`, `cfg.get("scheme", ...)`."""
    if isinstance(node, ast.Name):
        return node.id.endswith("scheme")
    if isinstance(node, ast.Attribute):
        return node.attr.endswith("scheme")
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "scheme"
    if isinstance(node, ast.Call):
        f = node.func
        return (isinstance(f, ast.Attribute) and f.attr == "get" and bool(node.args)
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == "scheme")
    return False


def _strings(node: ast.AST | None) -> list[ast.Constant]:
    if node is None:
        return []
    return [n for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _scheme_places(tree: ast.AST) -> list[ast.Constant]:
    """The string constants that stand where a scheme is meant."""
    out: list[ast.Constant] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg is not None and node.arg.endswith("scheme"):
            out += _strings(node.value)
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_schemeish(x) for x in operands):
                out += [s for x in operands if not _is_schemeish(x) for s in _strings(x)]
        elif isinstance(node, ast.Call) and _is_schemeish(node):
            out += [s for arg in node.args[1:] for s in _strings(arg)]
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == "scheme":
                    out += _strings(value)
        elif isinstance(node, (ast.AnnAssign, ast.Assign)):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(_is_schemeish(t) for t in targets):
                out += _strings(node.value)
        elif isinstance(node, ast.arguments):
            args = [*node.posonlyargs, *node.args]
            for a, default in zip(args[len(args) - len(node.defaults):], node.defaults):
                if a.arg.endswith("scheme"):
                    out += _strings(default)
            for a, default in zip(node.kwonlyargs, node.kw_defaults):
                if a.arg.endswith("scheme"):
                    out += _strings(default)
    return out


def scheme_names_in(path: str) -> list[tuple[int, str]]:
    """(line, name) of every scheme name the module at `path` (from the repository's root)
    writes as a string where it should not."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    others = set(names()) - {DEFAULT}
    found = [(n.lineno, n.value) for n in ast.walk(tree)
             if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in others]
    found += [(n.lineno, n.value) for n in _scheme_places(tree) if n.value == DEFAULT]
    own = {f"sim/schemes/{name}.py": name for name in names()}
    return sorted({(line, name) for line, name in found
                   if path != "sim/schemes/__init__.py" and own.get(path) != name and (path, name) not in EXEMPT})


@pytest.mark.parametrize("path", _modules())
def test_no_module_names_a_scheme_outside_its_own(path):
    assert scheme_names_in(path) == []


def test_the_check_sees_a_scheme_named_where_it_should_not_be(tmp_path, monkeypatch):
    """The check itself: each way a module could name a scheme is found, and the words a
    ring of GPUs uses are not."""
    import tests.sim.schemes.test_names as here

    assert len(_modules()) > 90                                # the real tree is read
    module = tmp_path / "sim" / "x.py"
    module.parent.mkdir()
    module.write_text('\n'.join([
        'a = "hybrid"',                                          # 1: another scheme, anywhere
        'b = cfg.get("scheme", "ring")',                         # 2
        'c = scenario.scheme == "ring"',                         # 3
        'd = Scenario(scheme="ring")',                           # 4
        'e = {"scheme": "ring"}',                                # 5
        'def f(scheme="ring"): pass',                            # 6
        'g = run.scheme in ("ring", "ulysses")',                 # 7: both
        'COLORS = {"ring": "#3a6fd8"}',                          # the ring's colour: not a scheme
        'h = f"{u} x ring {r}" + "ring"',                        # words: not a scheme
    ]))
    monkeypatch.setattr(here, "ROOT", str(tmp_path))
    assert here.scheme_names_in("sim/x.py") == [(1, "hybrid"), (2, "ring"), (3, "ring"), (4, "ring"),
                                                (5, "ring"), (6, "ring"), (7, "ring"), (7, "ulysses")]
