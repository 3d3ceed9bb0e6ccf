#!/usr/bin/env python3
"""Every allocation of accel goes through the Accelerator's hooks (DESIGN.md: "Every allocation goes through the
Accelerator's allocator hooks"). This lint fails on any raw allocation call in a header — malloc & co., and the CUDA
runtime's allocators — outside the core's allocator functions, which are the hooks' defaults.

usage: lint_alloc.py SOURCE_ROOT   (checks SOURCE_ROOT/accel*.h; prints "lint: N passed, M failed")
"""
import glob
import os
import re
import sys

RAW = re.compile(r'(?<![\w.>])(malloc|calloc|realloc|free|strdup|strndup|aligned_alloc|posix_memalign|valloc|'
                 r'cudaMalloc|cudaMallocHost|cudaHostAlloc|cudaMallocAsync|cudaMallocManaged|cudaMallocPitch|'
                 r'cudaFree|cudaFreeHost|cudaFreeAsync)\s*\(')
# the hooks' defaults: the only functions allowed to call the raw allocators
ALLOWED = {'accel__raw_alloc', 'accel__raw_free', 'accel_device_alloc', 'accel_device_free', 'accel_pinned_alloc',
           'accel_pinned_free'}
FUNC = re.compile(r'^(?:ACCEL__DEF|ACCEL__PRIVATE|static|ACCEL_API)?[\w\s\*]*?\b(\w+)\s*\([^;]*$')


def strip(text):
    """Blanks comments and string/char literals, keeping line structure."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r'[^\n]', ' ', text[i:j]))
            i = j
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(c + re.sub(r'[^\n]', ' ', text[i + 1:j]) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def check(path):
    bad = []
    func = None
    depth = 0
    for lineno, line in enumerate(strip(open(path, encoding='utf-8').read()).split('\n'), 1):
        if depth == 0:
            m = FUNC.match(line)
            if m and not line.startswith((' ', '\t', '#')):
                func = m.group(1)
        for m in RAW.finditer(line):
            if depth == 0 or func not in ALLOWED:
                bad.append('%s:%d: %s() in %s' % (os.path.basename(path), lineno, m.group(1), func or 'file scope'))
        depth += line.count('{') - line.count('}')
        if depth == 0 and '}' in line:
            func = None
    return bad


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    headers = sorted(glob.glob(os.path.join(root, 'accel*.h')))
    passed = failed = 0
    for h in headers:
        bad = check(h)
        if bad:
            failed += 1
            print('\n'.join(bad))
        else:
            passed += 1
    # the lint must be able to fail: a probe with a raw call outside the hooks
    probe = '/tmp/accel_lint_probe_%d.h' % os.getpid()
    with open(probe, 'w') as f:
        f.write('static void accel__probe(void) {\n    void *p = malloc(4); /* raw */\n    free(p);\n}\n')
    if len(check(probe)) == 2:
        passed += 1
    else:
        failed += 1
        print('lint self-check: the probe with two raw calls was not caught')
    os.remove(probe)
    print('lint: %d passed, %d failed (%d headers)' % (passed, failed, len(headers)))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
