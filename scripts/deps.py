#!/usr/bin/env python3
"""Prints which of FerryRuntime's folders use which others' names, and the cycles among them.

usage: scripts/deps.py [Sources/FerryRuntime]

A folder is a directory right under the target (`Remote/S3/` counts as `Remote`; files at the top
are `(top)`). A folder uses another when one of its files names a type, or a top-level function or
constant, that the other declares at the top level of a file (comments and string literals left
out). A name declared in more than one folder is left out as ambiguous. A member that
an `extension` adds to a type declared outside the target (`extension Timestamp`) counts as its
folder's when no other file of the target or of FerryCore declares that name; an extension of a
type of the target counts as a use of the type's folder (its members are not followed), and so do
initializers added to types outside it (they have no name to find).
"""
import os
import re
import sys
from collections import defaultdict

# FerryRuntime's folders as layers, the lowest first: each uses only those before it
# (`scripts/shape.py` fails the build otherwise). docs/design.md says what each holds.
LAYERS = ['Local', 'Transport', 'Engine', 'State', 'Remote', 'Trust', 'Delta', 'Setup', 'Fleet', 'Session', 'Agent']

DECLARATION = re.compile(
    r'^(?:(?:public|internal|private|fileprivate|package|final|indirect|nonisolated|'
    r'@\w+(?:\([^)]*\))?)\s+)*'
    r'(?:class|struct|enum|protocol|actor|typealias|func|let|var)\s+`?([A-Za-z_]\w*)')
LIMIT = int(os.environ.get('DEPS_NAMES', '8'))
IDENTIFIER = re.compile(r'[A-Za-z_]\w*')
EXTENSION = re.compile(r'^(?:(?:public|internal|private|fileprivate)\s+)?extension\s+([A-Za-z_][\w.]*)')
MEMBER = re.compile(r'^    (?:(?:public|internal|private|fileprivate|static|mutating|nonisolated|@\w+)\s+)*'
                    r'(?:func|var|let)\s+`?([A-Za-z_]\w*)')
ANY_DECLARATION = re.compile(r'(?:func|var|let|case|class|struct|enum|protocol|typealias)\s+`?([A-Za-z_]\w*)')


def without_comments_and_strings(text):
    """The text with comments and string literals blanked out, interpolations kept."""
    out = []
    i, n = 0, len(text)
    depth = 0  # open `/* */` comments (they nest in Swift)
    while i < n:
        if depth:
            if text.startswith('/*', i):
                depth += 1
                i += 2
            elif text.startswith('*/', i):
                depth -= 1
                i += 2
            else:
                out.append('\n' if text[i] == '\n' else ' ')
                i += 1
        elif text.startswith('//', i):
            end = text.find('\n', i)
            i = n if end < 0 else end
        elif text.startswith('/*', i):
            depth = 1
            i += 2
        elif text.startswith('"""', i) or text[i] == '"':
            quote = '"""' if text.startswith('"""', i) else '"'
            i += len(quote)
            while i < n and not text.startswith(quote, i):
                if text[i] == '\\' and text.startswith('\\(', i):
                    # An interpolation names code: keep it (one level of parentheses deep).
                    level, j = 0, i + 1
                    while j < n:
                        level += text[j] == '('
                        level -= text[j] == ')'
                        j += 1
                        if level == 0:
                            break
                    out.append(' ' + text[i + 2:j - 1] + ' ')
                    i = j
                elif text[i] == '\\':
                    i += 2
                else:
                    out.append('\n' if text[i] == '\n' else ' ')
                    i += 1
            i += len(quote)
        else:
            out.append(text[i])
            i += 1
    return ''.join(out)


def folder_of(root, path):
    parts = os.path.relpath(path, root).split(os.sep)
    return parts[0] if len(parts) > 1 else '(top)'


def swift_files(root):
    for directory, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith('.swift'):
                yield os.path.join(directory, name)


def cycles(graph):
    """Each strongly connected group of more than one folder (Tarjan)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                group.append(other)
                if other == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def folder_uses(root):
    """folder -> folder it uses -> the names it uses of it; and the folders."""
    texts = {path: without_comments_and_strings(open(path, encoding='utf-8').read())
             for path in swift_files(root)}
    declared = defaultdict(set)  # name -> folders
    extended = []  # (extended type, member name, folder)
    everywhere = defaultdict(int)  # name -> declarations of it at any depth, FerryCore's included
    for path, text in texts.items():
        extending = None
        for line in text.split('\n'):
            match = DECLARATION.match(line)
            if match:
                declared[match.group(1)].add(folder_of(root, path))
            if line and not line[0].isspace():
                match = EXTENSION.match(line)
                extending = match.group(1).split('.')[0] if match else None
            elif extending:
                match = MEMBER.match(line)
                if match:
                    extended.append((extending, match.group(1), folder_of(root, path)))
            for name in ANY_DECLARATION.findall(line):
                everywhere[name] += 1
    core = os.path.join(os.path.dirname(os.path.abspath(root)), 'FerryCore')
    for path in swift_files(core):
        for name in ANY_DECLARATION.findall(without_comments_and_strings(open(path, encoding='utf-8').read())):
            everywhere[name] += 1
    for extended_type, name, folder in extended:
        if extended_type not in declared and everywhere[name] == 1 and name not in declared:
            declared[name].add(folder)
    owner = {name: next(iter(folders)) for name, folders in declared.items() if len(folders) == 1}

    uses = defaultdict(lambda: defaultdict(set))  # folder -> folder -> names
    for path, text in texts.items():
        folder = folder_of(root, path)
        for name in set(IDENTIFIER.findall(text)):
            other = owner.get(name)
            if other and other != folder:
                uses[folder][other].add(name)
    return uses, sorted({folder_of(root, path) for path in texts})


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else 'Sources/FerryRuntime'
    uses, folders = folder_uses(root)
    graph = {folder: set(uses[folder]) for folder in folders}
    for folder in folders:
        targets = uses[folder]
        print(f'{folder} -> ' + (', '.join(sorted(targets)) or '(nothing)'))
        for other in sorted(targets):
            names = sorted(targets[other])
            shown = ', '.join(names[:LIMIT]) + (f', … ({len(names)})' if len(names) > LIMIT else '')
            print(f'    {other}: {shown}')
    groups = cycles(graph)
    print('cycles: ' + ('; '.join(' ↔ '.join(group) for group in groups) if groups else 'none'))


if __name__ == '__main__':
    main()
