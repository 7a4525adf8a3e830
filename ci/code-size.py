#!/usr/bin/env python3
"""Lines of code per .rs file, for the rule "no file over about 600 lines of code" (issue 29).

Prints, largest first, for each .rs file git tracks (or the paths given):
  code       lines with code on them outside comments (blank and comment-only lines do not count)
  non-test   code outside `#[cfg(test)]` items (a `mod tests {...}`, a `#[cfg(test)] fn`, a
             `#[cfg(test)] mod tests;` declaration); a file that is itself a test module (one
             that a file given declares with `#[cfg(test)] mod x;`, a `tests.rs`, a
             `*_proptest.rs`, or a file of an integration-test or bench folder) counts as all
             test
  total      every line
The rule, as `--check N` holds it (CI: `--check 600`; it prints each file that breaks it and
exits 1): a file of production code has at most N lines of code, its inline `#[cfg(test)]`
items included, since a reader of the module scrolls through those too; long test modules go
in sibling files (`#[cfg(test)] mod tests;`). A file that is all test (the sibling test
modules, integration tests, benches) has no bound: it is a list of independent cases read
one at a time, and issue 29's rule sends long test modules there.
Usage: ci/code-size.py [--over N | --check N] [PATH...]
"""
import os
import re
import subprocess
import sys


def classify(text):
    """Per line: whether it holds code, and the code text with comments and literals blanked."""
    n = len(text)
    i = 0
    code_chars = []  # text with comments removed and string contents replaced by spaces
    state = None
    depth = 0  # block comment nesting
    raw_hashes = 0
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if state is None:
            if c == "/" and nxt == "/":
                j = text.find("\n", i)
                j = n if j < 0 else j
                i = j
                continue
            if c == "/" and nxt == "*":
                state, depth = "block", 1
                i += 2
                continue
            m = re.match(r'b?r(#*)"', text[i:i + 260])
            if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
                state, raw_hashes = "raw", len(m.group(1))
                code_chars.append('"')
                i += m.end()
                continue
            if c == '"':
                state = "str"
                code_chars.append('"')
                i += 1
                continue
            if c == "'":
                # a char literal ('a', '\n', '\u{..}') or a lifetime ('a)
                if nxt == "\\":
                    j = text.find("'", i + 2)
                    code_chars.append("' '")
                    i = j + 1
                    continue
                if i + 2 < n and text[i + 2] == "'":
                    code_chars.append("' '")
                    i += 3
                    continue
            code_chars.append(c)
            i += 1
        elif state == "block":
            if c == "/" and nxt == "*":
                depth += 1
                i += 2
            elif c == "*" and nxt == "/":
                depth -= 1
                i += 2
                if depth == 0:
                    state = None
            else:
                if c == "\n":
                    code_chars.append("\n")
                i += 1
        elif state == "str":
            if c == "\\":
                code_chars.append(" " if nxt != "\n" else "\n")
                i += 2
            elif c == '"':
                state = None
                code_chars.append('"')
                i += 1
            else:
                code_chars.append("\n" if c == "\n" else " ")
                i += 1
        elif state == "raw":
            if c == '"' and text[i + 1:i + 1 + raw_hashes] == "#" * raw_hashes:
                state = None
                code_chars.append('"')
                i += 1 + raw_hashes
            else:
                code_chars.append("\n" if c == "\n" else " ")
                i += 1
    return "".join(code_chars)


TEST_ATTR = re.compile(r"#\[cfg\((test|all\(test\b[^\]]*)\)\]")


def test_lines(code):
    """Line numbers (0-based) that belong to `#[cfg(test)]` items of `code`."""
    lines = set()
    for m in TEST_ATTR.finditer(code):
        start = m.start()
        j = m.end()
        depth = 0
        end = len(code)
        while j < len(code):
            ch = code[j]
            if ch in "{([":
                depth += 1
            elif ch in "})]":
                depth -= 1
                if depth == 0 and ch == "}":
                    end = j
                    break
            elif ch == ";" and depth == 0:
                end = j
                break
            j += 1
        first = code.count("\n", 0, start)
        last = code.count("\n", 0, end)
        lines.update(range(first, last + 1))
    return lines


def test_children(path):
    """The files of the modules `path` declares with `#[cfg(test)] mod x;` (and `#[path]`)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    base = os.path.splitext(path)[0]
    if os.path.basename(path) in ("mod.rs", "lib.rs", "main.rs"):
        base = os.path.dirname(path)
    found = set()
    for m in re.finditer(r'#\[cfg\(test\)\]\s*(?:#\[path\s*=\s*"([^"]+)"\]\s*)?mod\s+(\w+)\s*;', text):
        if m.group(1):
            found.add(os.path.normpath(os.path.join(os.path.dirname(path), m.group(1))))
        else:
            found.add(os.path.join(base, m.group(2) + ".rs"))
            found.add(os.path.join(base, m.group(2), "mod.rs"))
    return found


TEST_FILES = set()


def is_test_file(path):
    if os.path.normpath(path) in TEST_FILES:
        return True
    base = os.path.basename(path)
    parts = path.split(os.sep)
    return (
        base == "tests.rs"
        or base.endswith("_proptest.rs")
        or "tests" in parts[:-1] and "src" not in parts[parts.index("tests") + 1:-1]
        or "benches" in parts[:-1]
    )


def measure(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    code = classify(text)
    code_lines = code.split("\n")
    tests = test_lines(code)
    has_code = [bool(line.strip()) for line in code_lines]
    total = text.count("\n") + (0 if text.endswith("\n") else 1)
    n_code = sum(has_code)
    n_nontest = 0 if is_test_file(path) else sum(
        1 for k, h in enumerate(has_code) if h and k not in tests
    )
    return total, n_code, n_nontest


def broken(path, n_code, n_nontest, limit):
    """Why `path` breaks the rule (module docstring) at `limit` lines, or None."""
    if is_test_file(path):
        return None
    if n_nontest > limit:
        return f"{n_nontest} lines of non-test code, over {limit}: split it by role"
    if n_code > limit:
        return (f"{n_code} lines of code with its inline tests, over {limit}: move them to a "
                f"sibling file (#[cfg(test)] mod tests;)")
    return None


def main():
    args = sys.argv[1:]
    over = 0
    check = None
    if args[:1] == ["--over"]:
        over = int(args[1])
        args = args[2:]
    elif args[:1] == ["--check"]:
        check = int(args[1])
        args = args[2:]
    paths = args or [
        p for p in subprocess.run(
            ["git", "ls-files", "*.rs"], capture_output=True, text=True, check=True
        ).stdout.split()
    ]
    for p in paths:
        TEST_FILES.update(test_children(p))
    rows = [(p, *measure(p)) for p in paths]
    if check is not None:
        bad = [(p, why) for p, _, n_code, n_nontest in rows
               if (why := broken(p, n_code, n_nontest, check))]
        for p, why in sorted(bad):
            print(f"{p}: {why}")
        largest = max(((r[3], r[0]) for r in rows), default=(0, "none"))
        print(f"{len(rows)} files; largest non-test code {largest[0]} lines ({largest[1]}); "
              f"{len(bad)} over {check} lines")
        sys.exit(1 if bad else 0)
    rows.sort(key=lambda r: (-r[3], -r[2], r[0]))
    print(f"{'non-test':>8} {'code':>6} {'total':>6}  file")
    for p, total, n_code, n_nontest in rows:
        if n_nontest > over or not over:
            print(f"{n_nontest:>8} {n_code:>6} {total:>6}  {p}")


if __name__ == "__main__":
    main()
