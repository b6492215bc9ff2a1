#!/usr/bin/env python3
"""bench/tile_phases: instrument.py still finds every anchor in today's
tile kernel sources (it edits a copy), and analyze.py reads its output
format back into the right phases."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
TOOL = os.path.join(ROOT, 'bench', 'tile_phases')


def fail(msg):
    print('FAIL:', msg)
    sys.exit(1)


def check_instrument(tmp):
    src = os.path.join(ROOT, 'src', 'cuda', 'tile_attention')
    dst = os.path.join(tmp, 'src', 'cuda', 'tile_attention')
    shutil.copytree(src, dst)
    r = subprocess.run([sys.executable, os.path.join(TOOL, 'instrument.py'), '--root', tmp],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail('instrument.py: ' + r.stdout + r.stderr)
    text = ''.join(open(os.path.join(dst, f)).read() for f in sorted(os.listdir(dst)))
    marks = sorted({int(k) for k in re.findall(r'ph_mark\((\d+)\);', text)})
    if marks != [0, 1, 2, 4, 5, 6, 10, 11, 12]:
        fail(f'phase marks placed: {marks}')
    if text.count('ph_dump<<<') != 2 or 'g_ph[3][ph_item()] = clock64()' not in text:
        fail('dump launches or first-stage mark missing')
    for kernel in ('hopper_csa_kernel.cuh', 'hopper_window_kernel.cuh'):
        k = open(os.path.join(dst, kernel)).read()
        if 'ph_start(' not in k or 'ph_end(' not in k:
            fail(f'{kernel}: item start or end mark missing')
    # The checkout itself is untouched.
    if os.path.exists(os.path.join(src, 'ph.cuh')):
        fail('instrument.py --root edited the checkout')


def read_medians(out, launch):
    """Phase medians printed for the launch titled `launch`."""
    got, inside = {}, False
    for line in out.splitlines():
        if line.startswith('launch '):
            inside = line.startswith(launch)
        elif inside and 'median' in line:
            name, rest = line.split('median')
            got[name.strip()] = float(rest.split()[0])
    return got


def check_analyze(tmp):
    # Two CTAs of an SWA bf16 launch, then one of a CSA bf16 launch: marks
    # 1, 2, 3, 6, 4, 5, 10, 11, 12 (cycles after mark 0), as ph_dump prints
    # them. SWA issues Q (mark 10) before reading its rows (mark 1).
    log = os.path.join(tmp, 'phases.log')
    with open(log, 'w') as f:
        f.write('PHCALL 6 2\n')
        f.write('PH 2 0 0 16 1000 27000 300 900 1000 0 41000 45000 100 500 600\n')
        f.write('PH 2 1 1 16 2000 28000 300 900 1000 0 41000 45000 100 500 600\n')
        f.write('unrelated bench output\n')
        f.write('PHCALL 14 1\n')
        f.write('PH 0 2 0 16 1000 9000 100 900 1000 0 41000 45000 300 500 600\n')
    r = subprocess.run([sys.executable, os.path.join(TOOL, 'analyze.py'), log],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail('analyze.py: ' + r.stderr)
    common = {'row masks': 200, 'compaction': 100, 'list prepared': 300, 'to first stage': 100,
              'mainloop': 40000, 'epilogue': 4000, 'total': 45000}
    want_swa = dict(common, **{'Q copies issued': 100, 'tile rows': 200, 'wall_ns': 26000})
    want_csa = dict(common, **{'tile rows': 100, 'Q copies issued': 200, 'wall_ns': 8000})
    got_swa = read_medians(r.stdout, 'launch 6 SWA bf16')
    got_csa = read_medians(r.stdout, 'launch 14 CSA bf16')
    if got_swa != want_swa or got_csa != want_csa:
        fail(f'analyze.py read SWA {got_swa}, CSA {got_csa}, expected SWA {want_swa}, '
             f'CSA {want_csa}:\n{r.stdout}')


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_instrument(tmp)
        check_analyze(tmp)
    print('tile_phases: instrument.py anchors found, analyze.py phases read back')


if __name__ == '__main__':
    main()
