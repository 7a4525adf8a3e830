#!/usr/bin/env python3
"""Import cycles between the modules of each crate (issue 29: modules by role, no cycles).

A module uses another where its non-test code names a path into it: `use crate::a::b`,
`use super::x`, `crate::a::f()`, `super::g()`, or `child::h()` for a child module declared
with `mod child;`. Each path is resolved to the deepest module it names. Prints the count of
modules and uses, then each cycle (a strongly connected component of two or more modules) with
the uses inside it, marked `parent/child` where it goes round only through uses of a module's
own ancestors (a parent calling `child::f` while the child uses `super::Item`) and `across
modules` where modules go round without them (a uses b, b uses a). Limits: paths are read
as text (a `use` inside a function counts for its module, a macro's paths do not); an
inline `mod x { .. }` is a module of its own.

The rule (issue 29: no import cycle) fails the script (exit status 1) on a cycle across
modules only. A parent/child cycle is how Rust's module tree is written, not a tangle: a
child sees its parent's types through `use super::Item` and the parent calls `child::f`;
the two are one unit, and neither can be understood or moved without the other anyway. A
cycle across modules (a uses b, b uses a, neither inside the other) is two modules that
cannot be read, tested or moved apart: that is what the rule forbids.
Usage: ci/module-cycles.py [--edges] [CRATE_DIR...]   (default: every workspace member)
"""
import importlib.util
import os
import re
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("code_size", os.path.join(here, "code-size.py"))
code_size = importlib.util.module_from_spec(spec)
spec.loader.exec_module(code_size)

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def crate_roots(pkg):
    roots = []
    for name in ("lib.rs", "main.rs"):
        p = os.path.join(pkg, "src", name)
        if os.path.exists(p):
            roots.append(p)
    bindir = os.path.join(pkg, "src", "bin")
    if os.path.isdir(bindir):
        roots += sorted(os.path.join(bindir, f) for f in os.listdir(bindir) if f.endswith(".rs"))
    return roots


def nontest_code(path):
    with open(path, encoding="utf-8") as f:
        code = code_size.classify(f.read())
    tests = code_size.test_lines(code)
    return "\n".join(l for k, l in enumerate(code.split("\n")) if k not in tests)


def walk(root):
    """{module path (tuple): non-test code} of the crate at `root`, following `mod x;`."""
    modules = {}

    def inline(modpath, code):
        """`code` with its inline `mod x { .. }` blocks taken out as modules of their own."""
        while True:
            m = re.search(r"\bmod\s+(" + IDENT + r")\s*\{", code)
            if not m:
                return code
            depth, j = 0, m.end() - 1
            while j < len(code):
                depth += {"{": 1, "}": -1}.get(code[j], 0)
                if depth == 0:
                    break
                j += 1
            body = code[m.end():j]
            modules[modpath + (m.group(1),)] = inline(modpath + (m.group(1),), body)
            code = code[:m.start()] + re.sub(r"[^\n]", " ", code[m.start():j + 1]) + code[j + 1:]

    def visit(modpath, path, is_root_like):
        code = inline(modpath, nontest_code(path))
        modules[modpath] = code
        base = os.path.dirname(path) if is_root_like else os.path.splitext(path)[0]
        for m in re.finditer(r"(#\[path\s*=\s*\"([^\"]+)\"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;", code):
            # a `#[path]` attribute's string was blanked by classify: read it from the source
            name = m.group(3)
            if m.group(1):
                continue  # a #[path] module: shared test harness code, outside the tree
            for cand, rootlike in ((os.path.join(base, name + ".rs"), False),
                                   (os.path.join(base, name, "mod.rs"), True)):
                if os.path.exists(cand):
                    visit(modpath + (name,), cand, rootlike)
                    break

    visit((), root, True)
    return modules


def children(modules, mod):
    return {m[-1] for m in modules if len(m) == len(mod) + 1 and m[:len(mod)] == mod}


def expand_use(tree):
    """`a::{b as c, d::{e, self}}` -> ["a::b", "a::d::e", "a::d"]."""
    tree = re.sub(r"\s*(::|[{},])\s*", r"\1", " ".join(tree.split()))
    out = []

    def go(prefix, t):
        depth = 0
        parts, cur = [], ""
        for ch in t:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        for p in parts:
            if "{" in p:
                i = p.index("{")
                go(prefix + p[:i], p[i + 1:p.rindex("}")])
                continue
            p = p.split(" as ")[0].strip()
            full = prefix + p
            out.append(full[: -len("::self")] if full.endswith("::self") else full)

    go("", tree)
    return out


def resolve(modules, here, path):
    """The deepest module that `path` (`crate::a::b`, `super::x`, `child::y`) names, seen
    from module `here`; None for another crate's path."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        mod, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        mod = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                mod = mod[:-1]
            segs = segs[1:]
    elif segs[0] in children(modules, here):
        mod = here
    else:
        return None
    for s in segs:
        if mod + (s,) in modules:
            mod = mod + (s,)
        else:
            break
    return mod


def edges_of(modules):
    edges = {}
    for mod, code in modules.items():
        targets = set()
        for m in re.finditer(r"\buse\s+([^;]+);", code):
            for u in expand_use(m.group(1)):
                t = resolve(modules, mod, u)
                if t is not None:
                    targets.add(t)
        for m in re.finditer(r"(?<![A-Za-z0-9_:])((?:" + IDENT + r"::)+)", code):
            t = resolve(modules, mod, m.group(1))
            if t is not None:
                targets.add(t)
        targets.discard(mod)
        edges[mod] = targets
    return edges


def sccs(nodes, edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            strong(v)
    return out


def name(crate, mod):
    return crate + ("::" + "::".join(mod) if mod else "")


def main():
    args = sys.argv[1:]
    show_edges = "--edges" in args
    args = [a for a in args if a != "--edges"]
    if not args:
        meta = subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1"],
                              capture_output=True, text=True, check=True).stdout
        import json
        root = json.loads(meta)["workspace_root"]
        args = sorted(os.path.relpath(os.path.dirname(p["manifest_path"]), root)
                      for p in json.loads(meta)["packages"])
    total_edges = 0
    total_modules = 0
    real, family = [], []
    for pkg in args:
        for root in crate_roots(pkg):
            crate = os.path.relpath(root)
            modules = walk(root)
            edges = edges_of(modules)
            total_modules += len(modules)
            total_edges += sum(len(v) for v in edges.values())
            if show_edges:
                for a in sorted(edges):
                    for b in sorted(edges[a]):
                        print(f"edge {name(crate, a)} -> {name(crate, b)}")
            # without the uses of a module's own ancestors (`use super::Item`), what still
            # goes round is a cycle across modules; the rest is the parent/child kind
            down = {a: {b for b in bs if b != a[:len(b)]} for a, bs in edges.items()}
            across = [c for c in sccs(list(modules), down) if len(c) > 1]
            for comp in sccs(list(modules), edges):
                if len(comp) < 2:
                    continue
                inside = sorted((a, b) for a in comp for b in edges[a] if b in comp)
                kind = any(set(c) <= set(comp) for c in across)
                (real if kind else family).append((crate, sorted(comp), inside))
    print(f"{total_modules} modules, {total_edges} module-to-module uses")
    print(f"cycles: {len(real) + len(family)} "
          f"({len(real)} across modules, {len(family)} parent/child only)")
    for crate, comp, inside in real + family:
        kind = "parent/child" if (crate, comp, inside) in family else "across modules"
        print(f"  {kind}: " + ", ".join(name(crate, m) for m in comp))
        for a, b in inside:
            print(f"    {name(crate, a)} -> {name(crate, b)}")
    if real:
        print(f"FAILED: {len(real)} cycle(s) across modules (the rule: none; see the docstring at the top of this script)")
        sys.exit(1)

if __name__ == "__main__":
    main()
