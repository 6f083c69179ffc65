#!/usr/bin/env python3
"""Fails on an import cycle between the top-level modules of a crate.

For every crate under crates/*/, each file src/foo.rs or directory src/foo/ (with mod.rs, or
next to foo.rs) directly under src is a top-level module (lib.rs and main.rs are the roots, not
modules). Module A depends on module B when a .rs file of A (its file and everything under its
directory) names a path `crate::B` (or `$crate::B`): `use crate::B::x`, grouped
`use crate::{B, C::{x, y}}`, or inline `crate::B::f()` in code. A `super::` chain that climbs
exactly to the crate root (`super::B` in src/a.rs, `super::super::B` in src/a/x.rs) names B too.
A root re-export (`crate::Name` where lib.rs has `pub use B::Name`) is not an edge, unless
--follow-root-reexports is given.
Comments, doc comments, string and char literals, and `#[cfg(test)]` items (a whole
`#[cfg(test)] mod tests { ... }` block, or the file of `#[cfg(test)] mod tests;`) are ignored.

The strongly connected components of that graph (Tarjan) with more than one module are cycles;
each is printed with every edge inside it and one file:line that creates the edge.
Exit status: 1 if any checked crate has a cycle, 0 otherwise (2 on a usage error).

    scripts/check-module-cycles.py                    # every crate
    scripts/check-module-cycles.py --crate myriad-commands
    scripts/check-module-cycles.py --crate commands -v   # every reference of each cycle edge
"""

import argparse
import bisect
import os
import re
import sys
from collections import defaultdict

IDENT = r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*"
IDENT_RE = re.compile(IDENT)
WORD_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
RAW_STRING_RE = re.compile(r'(?:b|c)?r(#*)"')
CFG_TEST_RE = re.compile(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
INNER_CFG_TEST_RE = re.compile(r"#\s*!\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]")
OUTLINE_MOD_RE = re.compile(r"\s*(?:pub\s*(?:\([^)]*\))?\s*)?mod\s+(" + IDENT + r")\s*;")
INLINE_MOD_RE = re.compile(r"(?<![\w$])mod\s+(" + IDENT + r")\s*\{")
CRATE_RE = re.compile(r"(?<![\w:])\$?crate\s*::\s*")
SUPER_RE = re.compile(r"(?<![\w:$])super\s*::\s*")
SUPER_NEXT_RE = re.compile(r"super\s*::\s*")


def blank(chars, start, end):
    """Replaces chars[start:end] with spaces, keeping newlines (so offsets and lines survive)."""
    for i in range(start, min(end, len(chars))):
        if chars[i] != "\n":
            chars[i] = " "


def strip_comments_and_literals(text):
    """Returns text with comments and string/char literals blanked out, same length and lines."""
    out = list(text)
    n = len(text)
    i = 0
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            end = text.find("\n", i)
            end = n if end < 0 else end
            blank(out, i, end)
            i = end
        elif c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(out, i, j)
            i = j
        elif c in "bcr" and (i == 0 or text[i - 1] not in WORD_CHARS) and RAW_STRING_RE.match(text, i):
            m = RAW_STRING_RE.match(text, i)
            close = '"' + m.group(1)
            end = text.find(close, m.end())
            end = n if end < 0 else end + len(close)
            blank(out, i, end)
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(out, i, j + 1)
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}', '"', '{') or a lifetime/label ('a, 'static).
            if nxt == "\\":
                end = text.find("'", i + 3)
                end = n if end < 0 else end + 1
                blank(out, i, end)
                i = end
            elif i + 2 < n and text[i + 2] == "'":
                blank(out, i, i + 3)
                i += 3
            else:
                i += 1
        else:
            i += 1
    return "".join(out)


def matching_close(text, open_pos):
    """Position just after the bracket matching the one at open_pos (all of (), [], {} nest)."""
    depth = 0
    for j in range(open_pos, len(text)):
        ch = text[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(text)


def item_end(text, pos):
    """End of the item starting at pos: a `;` or a closing `}` at bracket depth 0."""
    depth = 0
    for j in range(pos, len(text)):
        ch = text[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0 and ch == "}":
                return j + 1
        elif ch == ";" and depth == 0:
            return j + 1
    return len(text)


def skip_attributes(text, pos):
    """Skips whitespace and outer attributes (#[...]) from pos."""
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if text.startswith("#", pos):
            j = pos + 1
            while j < len(text) and text[j].isspace():
                j += 1
            if j < len(text) and text[j] == "[":
                pos = matching_close(text, j)
                continue
        return pos


def remove_test_items(text):
    """Blanks #[cfg(test)] items. Returns (text, names of `#[cfg(test)] mod NAME;` children)."""
    if INNER_CFG_TEST_RE.search(text):
        return re.sub(r"[^\n]", " ", text), set()
    chars = list(text)
    test_children = set()
    pos = 0
    while True:
        m = CFG_TEST_RE.search(text, pos)
        if not m:
            break
        start = skip_attributes(text, m.end())
        outline = OUTLINE_MOD_RE.match(text, start)
        if outline:
            test_children.add(outline.group(1).removeprefix("r#"))
            end = outline.end()
        else:
            end = item_end(text, start)
        blank(chars, m.start(), end)
        pos = max(end, m.end())
    return "".join(chars), test_children


def parse_tail(text, pos):
    """The first segments named after `crate::` at pos: [(name, offset)], one per group member."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    m = IDENT_RE.match(text, pos)
    if m:
        return [(m.group(0).removeprefix("r#"), pos)]
    if not text.startswith("{", pos):
        return []  # `crate::*` or something unparseable
    end = matching_close(text, pos) - 1
    found, depth, member_start = [], 0, pos + 1
    for j in range(pos + 1, end + 1):
        ch = text[j]
        if ch in "([{":
            depth += 1
        elif ch in ")]}" and j < end:
            depth -= 1
        if (ch == "," and depth == 0) or j == end:
            k = member_start
            while k < j and text[k].isspace():
                k += 1
            # `::b` in `{::b}` is not valid Rust; a leading `self` (crate itself) is no module.
            m = IDENT_RE.match(text, k, j)
            if m and m.group(0) != "self":
                found.append((m.group(0).removeprefix("r#"), k))
            member_start = j + 1
    return found


ROOT_USE_RE = re.compile(r"(?<![\w$])pub\s*(?:\([^)]*\))?\s*use\s+(?:crate\s*::\s*|self\s*::\s*)?(" + IDENT + r")\s*::")


def use_tree_names(text, pos):
    """Names a use tree starting at pos brings into scope (`a::{b, c as d, e::*}` gives b, d)."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if text.startswith("{", pos):
        end = matching_close(text, pos) - 1
        names, depth, start = [], 0, pos + 1
        for j in range(pos + 1, end + 1):
            ch = text[j]
            if ch in "([{":
                depth += 1
            elif ch in ")]}" and j < end:
                depth -= 1
            if (ch == "," and depth == 0) or j == end:
                if text[start:j].strip():
                    names.extend(use_tree_names(text, start))
                start = j + 1
        return names
    m = IDENT_RE.match(text, pos)
    if not m:
        return []  # a glob: its names are unknown
    after = text[m.end():]
    stripped = after.lstrip()
    if stripped.startswith("::"):
        return use_tree_names(text, m.end() + (len(after) - len(stripped)) + 2)
    alias = re.match(r"\s+as\s+(" + IDENT + ")", after)
    name = alias.group(1) if alias else m.group(0)
    return [] if name in ("self", "_") else [name.removeprefix("r#")]


def root_reexports(root_text, modules):
    """{name: module} for the crate root's `pub use module::{...}` re-exports."""
    exported = {}
    for m in ROOT_USE_RE.finditer(root_text):
        module = m.group(1).removeprefix("r#")
        if module in modules:
            for name in use_tree_names(root_text, m.end()):
                exported.setdefault(name, module)
    return exported


def module_depth(rel_parts):
    """Depth of the module a file defines: src/a.rs and src/a/mod.rs are 1, src/a/b.rs is 2."""
    return len(rel_parts) - (1 if rel_parts[-1] == "mod.rs" else 0)


def inline_mod_ranges(text):
    return [(m.start(), matching_close(text, m.end() - 1)) for m in INLINE_MOD_RE.finditer(text)]


def root_references(text, depth):
    """[(name, offset)] of the first segments of every path that starts at the crate root."""
    refs = []
    for m in CRATE_RE.finditer(text):
        refs.extend(parse_tail(text, m.end()))
    mods = None
    for m in SUPER_RE.finditer(text):
        count, pos = 1, m.end()
        while True:
            nxt = SUPER_NEXT_RE.match(text, pos)
            if not nxt:
                break
            count, pos = count + 1, nxt.end()
        if mods is None:
            mods = inline_mod_ranges(text)
        here = depth + sum(1 for a, b in mods if a <= m.start() < b)
        if count == here:
            refs.extend(parse_tail(text, pos))
    # A `super::super::` chain matches SUPER_RE only once: the lookbehind rejects the inner ones.
    return refs


class Crate:
    def __init__(self, directory):
        self.directory = directory
        self.src = os.path.join(directory, "src")
        self.name = read_package_name(os.path.join(directory, "Cargo.toml")) or os.path.basename(directory)
        self.modules = {}  # name -> [absolute .rs paths]
        self.edges = defaultdict(list)  # (from, to) -> [(path, line)]

    def discover(self):
        entries = sorted(os.listdir(self.src)) if os.path.isdir(self.src) else []
        for entry in entries:
            full = os.path.join(self.src, entry)
            if os.path.isfile(full) and entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
                self.modules.setdefault(entry[:-3], []).append(full)
        for entry in entries:
            full = os.path.join(self.src, entry)
            if not os.path.isdir(full) or entry == "bin":
                continue
            if entry in self.modules or os.path.isfile(os.path.join(full, "mod.rs")):
                files = self.modules.setdefault(entry, [])
                for root, dirs, names in os.walk(full):
                    dirs.sort()
                    files.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(".rs"))

    def scan(self, follow_reexports=False):
        # The crate root: lib.rs (a main.rs next to it is another crate, using this one by name).
        root_text = ""
        for root_file in ("lib.rs", "main.rs"):
            path = os.path.join(self.src, root_file)
            if os.path.isfile(path):
                with open(path, encoding="utf-8", errors="replace") as handle:
                    root_text, root_test_children = remove_test_items(strip_comments_and_literals(handle.read()))
                for child in root_test_children:  # `#[cfg(test)] mod tests;` in the root
                    self.modules.pop(child, None)
                break
        names = {module: module for module in self.modules}
        if follow_reexports:
            for name, module in root_reexports(root_text, self.modules).items():
                names.setdefault(name, module)
        cleaned, test_files = {}, set()
        for files in self.modules.values():
            for path in files:
                with open(path, encoding="utf-8", errors="replace") as handle:
                    text, children = remove_test_items(strip_comments_and_literals(handle.read()))
                cleaned[path] = text
                # Children of src/a.rs and src/a/mod.rs live in src/a/.
                base = os.path.dirname(path) if os.path.basename(path) == "mod.rs" else path[:-3]
                for child in children:
                    test_files.add(os.path.join(base, child + ".rs"))
                    test_files.add(os.path.join(base, child, "mod.rs"))
        # Files of a #[cfg(test)] child module, and everything below them, are test code.
        test_dirs = {os.path.dirname(p) for p in test_files if p.endswith("mod.rs")}
        test_dirs |= {p[:-3] for p in test_files if not p.endswith("mod.rs")}
        for module, files in self.modules.items():
            for path in files:
                if path in test_files or any(path.startswith(d + os.sep) for d in test_dirs):
                    continue
                text = cleaned[path]
                newlines = [i for i, ch in enumerate(text) if ch == "\n"]
                rel = os.path.relpath(path, self.src).split(os.sep)
                for name, offset in root_references(text, module_depth(rel)):
                    target = names.get(name)
                    if target is not None and target != module:
                        line = bisect.bisect_left(newlines, offset) + 1
                        self.edges[(module, target)].append((path, line))


def read_package_name(cargo_toml):
    try:
        with open(cargo_toml, encoding="utf-8") as handle:
            in_package = False
            for raw in handle:
                line = raw.strip()
                if line.startswith("["):
                    in_package = line == "[package]"
                elif in_package:
                    m = re.match(r'name\s*=\s*"([^"]+)"', line)
                    if m:
                        return m.group(1)
    except OSError:
        pass
    return None


def strongly_connected_components(nodes, successors):
    """Tarjan's algorithm, iterative. Returns the components, each a sorted list."""
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(successors.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(successors.get(child, ()))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                result.append(sorted(component))
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--crate", help="check only this crate (package name or directory name)")
    parser.add_argument("--follow-root-reexports", action="store_true",
                        help="also count `crate::Name` where the crate root has `pub use B::Name` as a use of B")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every reference of each cycle edge")
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                        help="workspace root (default: the parent of scripts/)")
    args = parser.parse_args()

    root = os.path.abspath(args.root)
    crates_dir = os.path.join(root, "crates")
    crates = [Crate(os.path.join(crates_dir, d)) for d in sorted(os.listdir(crates_dir))
              if os.path.isfile(os.path.join(crates_dir, d, "Cargo.toml"))]
    if args.crate:
        crates = [c for c in crates if args.crate in (c.name, os.path.basename(c.directory))]
        if not crates:
            print(f"no crate named {args.crate!r} under {crates_dir}", file=sys.stderr)
            return 2

    failed = 0
    for crate in crates:
        crate.discover()
        crate.scan(args.follow_root_reexports)
        successors = defaultdict(list)
        for source, target in sorted(crate.edges):
            successors[source].append(target)
        cycles = [c for c in strongly_connected_components(sorted(crate.modules), successors) if len(c) > 1]
        cycles.sort(key=lambda c: (-len(c), c))
        count = len(crate.modules)
        if not cycles:
            print(f"{crate.name}: {count} modules, no cycle")
            continue
        failed += 1
        plural = "cycle" if len(cycles) == 1 else "cycles"
        print(f"{crate.name}: {count} modules, {len(cycles)} {plural}")
        for number, component in enumerate(cycles, 1):
            members = set(component)
            inside = sorted((s, t) for (s, t) in crate.edges if s in members and t in members)
            print(f"  cycle {number}: {', '.join(component)} ({len(component)} modules, {len(inside)} edges)")
            for source, target in inside:
                refs = sorted(set(crate.edges[(source, target)]))
                files = len({p for p, _ in refs})
                where = f"{os.path.relpath(refs[0][0], root)}:{refs[0][1]}"
                print(f"    {source} -> {target}: {len(refs)} refs in {files} files, e.g. {where}")
                if args.verbose:
                    for path, line in refs:
                        print(f"        {os.path.relpath(path, root)}:{line}")
    if failed:
        print(f"{failed} of {len(crates)} crates have a module cycle")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # piped into head
        sys.exit(1)
