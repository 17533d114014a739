#!/usr/bin/env python3
"""The shape CI keeps: fails (exit 1) when any of these is broken, naming each place.

- Layers: FerryRuntime's folders in the order of `deps.LAYERS`, each using only those below it
  (so none is in a cycle); a folder that is not declared there is an error too.
- Files: a source, test or script file holds at most 600 lines.
- Functions: a Swift function, initializer or subscript (its declaration to its closing brace),
  and a Python function, holds at most 80 lines.

usage: scripts/shape.py            (from the repository's root; scripts/test.sh runs it)
"""
import ast
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deps  # noqa: E402

FILE_LIMIT = 600
FUNCTION_LIMIT = 80
CHECKED = ('Sources', 'Tests', 'scripts', 'examples')
SUFFIXES = ('.swift', '.py', '.sh')

SWIFT_FUNCTION = re.compile(
    r'^\s*(?:(?:public|internal|private|fileprivate|package|final|override|static|class|mutating|nonmutating|'
    r'nonisolated|convenience|required|@\w+(?:\([^)]*\))?)\s+)*'
    r'(func\s+`?[A-Za-z_]\w*|func\s+[^\s(]+|init[?!]?|deinit|subscript)(?=[\s(<{])')
# A line that starts another declaration, or closes the type: the one before had no body.
NEXT_DECLARATION = re.compile(
    r'^\s*(?:}|(?:(?:public|internal|private|fileprivate|static|class|mutating|@\w+)\s+)*'
    r'(?:func|init|deinit|subscript|var|let|case|associatedtype|typealias)\b)')


def files():
    for top in CHECKED:
        for directory, _, names in os.walk(top):
            if '/.' in directory or directory.startswith('.'):
                continue
            for name in sorted(names):
                if name.endswith(SUFFIXES):
                    yield os.path.join(directory, name)


def swift_functions(text):
    """(first line, lines, name) of each function with a body in Swift source `text`."""
    lines = deps.without_comments_and_strings(text).split('\n')
    found = []
    for i, line in enumerate(lines):
        match = SWIFT_FUNCTION.match(line)
        if not match:
            continue
        end = body_end(lines, i, match.end())
        if end is not None:
            found.append((i + 1, end - i + 1, match.group(1).replace('func ', '')))
    return found


def body_end(lines, first, column):
    """The line of the brace that closes the body a declaration at `first` opens (None: no body)."""
    depth, braces = 0, 0
    for j in range(first, min(len(lines), first + 4000)):
        text = lines[j][column:] if j == first else lines[j]
        if j > first and braces == 0 and depth == 0 and NEXT_DECLARATION.match(text):
            return None
        for c in text:
            if braces == 0:
                if c in '([':
                    depth += 1
                elif c in ')]':
                    depth -= 1
                elif c == '{' and depth == 0:
                    braces = 1
            elif c == '{':
                braces += 1
            elif c == '}':
                braces -= 1
                if braces == 0:
                    return j
    return None


def python_functions(text):
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append((node.lineno, node.end_lineno - node.lineno + 1, node.name))
    return found


def layer_problems(root='Sources/FerryRuntime'):
    uses, folders = deps.folder_uses(root)
    rank = {name: i for i, name in enumerate(deps.LAYERS)}
    problems = [f'{root}/{folder}: not in the layer order (declare it in scripts/deps.py, LAYERS)'
                for folder in folders if folder not in rank]
    for folder in folders:
        for other, names in sorted(uses[folder].items()):
            if folder in rank and other in rank and rank[other] > rank[folder]:
                shown = ', '.join(sorted(names)[:6]) + (' …' if len(names) > 6 else '')
                problems.append(f'{root}/{folder} uses {other}, a layer above it ({shown})')
    return problems


def main():
    problems = layer_problems()
    for path in files():
        text = open(path, encoding='utf-8').read()
        count = text.count('\n') + (0 if text.endswith('\n') or not text else 1)
        if count > FILE_LIMIT:
            problems.append(f'{path}: {count} lines (at most {FILE_LIMIT}: split it by concern)')
        functions = swift_functions(text) if path.endswith('.swift') else \
            python_functions(text) if path.endswith('.py') else []
        for line, length, name in functions:
            if length > FUNCTION_LIMIT:
                problems.append(f'{path}:{line}: {name} is {length} lines (at most {FUNCTION_LIMIT})')
    for problem in problems:
        print('shape: ' + problem, file=sys.stderr)
    if problems:
        print(f'shape: {len(problems)} problem(s); docs/design.md ("The shape CI keeps") says why these limits', file=sys.stderr)
        return 1
    print('shape: layers hold, no file over 600 lines, no function over 80')
    return 0


if __name__ == '__main__':
    sys.exit(main())
