#!/usr/bin/env python3
"""Per-CTA phase times of the Hopper tile kernel from instrument.py's output.

Usage: analyze.py LOG...  (the stdout of `step5attn bench` built with
instrument.py). For each dumped launch: the layer kind, the kernel's span
and, per phase, the median and 10th / 90th percentiles over its CTAs in
SM clock cycles (clock64; wall_ns is the CTA's globaltimer span).
"""
import collections
import statistics
import sys


def launches(path):
    out, cur = [], None
    for line in open(path, errors='replace'):
        w = line.split()
        if not w:
            continue
        if w[0] == 'PHCALL':
            cur = {'launch': int(w[1]), 'ctas': {}}
            out.append(cur)
        elif w[0] == 'PH' and cur is not None and len(w) == 16:
            kind, b, start, end = int(w[1]), int(w[3]), int(w[5]), int(w[6])
            cur['ctas'][b] = (kind, start, end, [int(x) for x in w[7:16]])
    return out


def phases(kind, c):
    tile_rows, list_ready, first_stage, q_landed, mainloop_end, stored, q_issued, masks, compacted = c
    if kind & 2:  # SWA: Q copies issued before the tile's rows are read
        p = {'Q copies issued': q_issued, 'tile rows': tile_rows - q_issued}
        list_start = tile_rows
    else:
        p = {'tile rows': tile_rows, 'Q copies issued': q_issued - tile_rows}
        list_start = q_issued
    p.update({
        'row masks': masks - list_start,
        'compaction': compacted - masks,
        'list prepared': list_ready - compacted,
    })
    if kind & 1:  # fp8: wait for Q, Q to f16, first stage widened
        p['Q wait'] = q_landed - list_ready
        p['Q to f16, stage 0'] = first_stage - q_landed
    else:
        p['to first stage'] = first_stage - list_ready
    p['mainloop'] = mainloop_end - first_stage
    p['epilogue'] = stored - mainloop_end
    p['total'] = stored
    return p


def main():
    for path in sys.argv[1:]:
        print('##', path)
        for d in launches(path):
            ctas = d['ctas']
            if not ctas:
                continue
            kind = next(iter(ctas.values()))[0]
            name = ('SWA' if kind & 2 else 'CSA') + (' fp8' if kind & 1 else ' bf16')
            span = max(v[2] for v in ctas.values()) - min(v[1] for v in ctas.values())
            cols = collections.defaultdict(list)
            for kind_, start, end, c in ctas.values():
                for k, v in phases(kind_, c).items():
                    cols[k].append(v)
                cols['wall_ns'].append(end - start)
            print(f"launch {d['launch']} {name}: span {span / 1e3:.1f} us, {len(ctas)} CTAs")
            for k, v in cols.items():
                s = sorted(v)
                print(f'   {k:20s} median {statistics.median(v):9.0f}  '
                      f'p10 {s[len(s) // 10]:9.0f}  p90 {s[9 * len(s) // 10]:9.0f}')


if __name__ == '__main__':
    main()
