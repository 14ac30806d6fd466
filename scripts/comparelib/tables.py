"""scripts/comparelib/tables.py - the figures of each workload: medians over
the runs, the table printed per workload, summary.csv, and the speed
summary line."""
import csv
import math
import statistics

from .allocators import BASELINE
from .workloads import Workload

def fmt_mib(kb):
    return '-' if kb is None else '%.1f' % (kb / 1024.0)


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def summarize(w, rows, results):
    """rows: list of row names; results[row] = [RunResult]; -> list of dicts."""
    out = []
    for row in rows:
        rs = results.get(row, [])
        good = [r for r in rs if r.ok]
        d = {'row': row, 'runs': len(rs), 'ok': len(good),
             'wall': median([r.wall for r in good]),
             'peak': median([r.peak_kb for r in good]),
             'final': median([r.final_kb for r in good]),
             'failed': [r.status for r in rs if not r.ok],
             # one note per row (run 1's), e.g. redis's malloc check
             'notes': [r.note for r in good if r.note][:1]}
        for key, _, better, _ in w.extra:
            vals = [num(r.metrics.get(key)) for r in good]
            if better is None or any(v is None for v in vals):
                raw = [r.metrics.get(key) for r in good if r.metrics.get(key) is not None]
                d[key] = raw[len(raw) // 2] if raw and better is None else median(vals)
            else:
                d[key] = median(vals)
        out.append(d)
    return out


def render_table(w, summ, runs):
    # Extra columns nobody reported (e.g. RSS/live for a command that does
    # not print live_bytes) are left out.
    extra = [e for e in w.extra if any(d.get(e[0]) is not None for d in summ)]
    w = Workload(w.name, w.desc, w.argv, w.kind, w.params, extra, speed=w.speed)
    base = next((d for d in summ if d['row'] == BASELINE and d['ok']), None)
    cols = [('wall', 'wall s', False), ('peak', 'peak MiB', False),
            ('final', 'final MiB', False)]

    def best(key, higher):
        vals = [d[key] for d in summ if d['ok'] and isinstance(d.get(key), (int, float))]
        if not vals:
            return None
        return max(vals) if higher else min(vals)

    header = ['allocator']
    for _, h, _ in cols:
        header += [h, 'x' + BASELINE[:2]]
    for _, h, _, ratio in w.extra:
        header.append(h)
        if ratio:
            header.append('x' + BASELINE[:2])
    lines = []
    table = [header]
    for d in summ:
        if not d['ok']:
            table.append([d['row'], 'FAILED'] + [''] * (len(header) - 2))
            continue
        cells = [d['row']]
        for key, _, higher in cols:
            v = d[key]
            b = best(key, higher)
            mark = '*' if v is not None and b is not None and v == b else ' '
            s = '-' if v is None else ('%.2f' % v if key == 'wall' else fmt_mib(v))
            cells.append(s + mark)
            if base and base[key] and v is not None:
                cells.append('%.2f' % (v / base[key]))
            else:
                cells.append('-')
        for key, _, higher, ratio in w.extra:
            v = d.get(key)
            if isinstance(v, str) and num(v) is not None:
                v = num(v)              # a figure kept as printed (the middle run's)
            if isinstance(v, float):
                b = best(key, higher) if higher is not None else None
                mark = '*' if b is not None and v == b else ' '
                s = ('%.1f' % (v / 1e6)) if key.endswith('ops_per_s') else \
                    ('%.2f' % v if abs(v) < 1000 else '%d' % v)
                cells.append(s + mark)
            else:
                cells.append('-' if v is None else str(v))
            if ratio:
                bv = base.get(key) if base else None
                if isinstance(v, float) and isinstance(bv, float) and bv:
                    cells.append('%.2f' % (v / bv))
                else:
                    cells.append('-')
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines.append('== %s: %s' % (w.name, w.desc))
    lines.append('   %d run(s) per allocator; medians; x%s = ratio to %s; * = best'
                 % (runs, BASELINE[:2], BASELINE))
    for r in table:
        lines.append('  ' + '  '.join(c.rjust(widths[i]) if i else c.ljust(widths[i])
                                      for i, c in enumerate(r)).rstrip())
    for d in summ:
        for f in d['failed']:
            lines.append('   %s: FAILED: %s' % (d['row'], f))
        for n in d['notes']:
            lines.append('   %s: %s' % (d['row'], n))
    if not base:
        lines.append('   (no %s figures: ratios not available)' % BASELINE)
    return '\n'.join(lines)


SPEED_REFS = ['jemalloc', 'mimalloc']


def speed_summary(workloads, summs):
    """The summary line over the speed workloads: for each slabdefrag row
    and each of SPEED_REFS, the geometric mean over the speed workloads of
    (median time_s of the row) / (median time_s of the reference).  Only
    workloads where both have a time count; None if there is nothing."""
    speed = [w for w in workloads if w.speed]
    if not speed:
        return None
    rows = []
    for w in speed:
        rows += [d['row'] for d in summs[w.name]
                 if d['row'].startswith('slabdefrag') and d['row'] not in rows]
    lines = ['== speed summary: geometric mean over the speed workloads (%s) of the '
             'ratios of their timed phases (median time_s); < 1: faster than the reference'
             % ', '.join(w.name for w in speed)]
    for row in rows:
        for ref in SPEED_REFS:
            logs, names = [], []
            for w in speed:
                t = {d['row']: d.get('time_s') for d in summs[w.name] if d['ok']}
                a, b = t.get(row), t.get(ref)
                if isinstance(a, float) and isinstance(b, float) and a > 0 and b > 0:
                    logs.append(math.log(a / b))
                    names.append(w.name)
            if logs:
                lines.append('   %s / %s: %.3f  (%d workload%s)'
                             % (row, ref, math.exp(sum(logs) / len(logs)), len(logs),
                                '' if len(logs) == 1 else 's'))
            else:
                lines.append('   %s / %s: -  (no workload with both times)' % (row, ref))
    return '\n'.join(lines)


def write_summary(path, workloads, summs):
    """summary.csv: the medians of every row, and their ratios to BASELINE."""
    with open(path, 'w', newline='') as f:
        cw = csv.writer(f)
        cw.writerow(['workload', 'allocator', 'runs_ok', 'runs', 'wall_s_median',
                     'peak_rss_kb_median', 'final_rss_kb_median', 'wall_vs_jemalloc',
                     'peak_vs_jemalloc', 'final_vs_jemalloc', 'extra'])
        for w in workloads:
            summ = summs[w.name]
            base = next((d for d in summ if d['row'] == BASELINE and d['ok']), None)
            for d in summ:
                def ratio(key):
                    if base and base[key] and d[key] is not None:
                        return '%.4f' % (d[key] / base[key])
                    return ''
                cw.writerow([w.name, d['row'], d['ok'], d['runs'],
                             '' if d['wall'] is None else '%.4f' % d['wall'],
                             '' if d['peak'] is None else int(d['peak']),
                             '' if d['final'] is None else int(d['final']),
                             ratio('wall'), ratio('peak'), ratio('final'),
                             ';'.join('%s=%s' % (key, d.get(key)) for key, _, _, _ in w.extra)])
