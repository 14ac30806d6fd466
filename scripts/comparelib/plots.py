"""scripts/comparelib/plots.py - RSS and PSS over time of run 1 of every
allocator, one gnuplot PNG per workload (with its .gp script and .dat
files)."""
import os
import re
import subprocess

from .common import say

def plot(w, rows, results, outdir):
    series = []
    shrinks = []
    for row in rows:
        rs = [r for r in results.get(row, []) if r.samples]
        if not rs:
            continue
        r = rs[0]
        # The plot stops at the workload's `exit` event, if it reports one:
        # what follows is teardown (samples.csv has everything).
        t_exit = min([t for n, t in r.events if n == 'exit'], default=None)
        dat = '%s-%s.dat' % (w.name, row.replace('+', '_'))
        with open(os.path.join(outdir, dat), 'w') as f:
            f.write('# t_s rss_mib pss_mib\n')
            for t, rss, _, pss in r.samples:
                if t_exit is not None and t > t_exit:
                    break
                f.write('%.3f %.3f %s\n' % (t, rss / 1024.0,
                                            '?' if pss is None else '%.3f' % (pss / 1024.0)))
        series.append((dat, row))
        for name, t in r.events:
            if 'shrink' in name.lower():
                near = min(r.samples, key=lambda s: abs(s[0] - t))
                shrinks.append((t, near[1] / 1024.0, row))
    if not series:
        return None
    plots = []
    for n, (dat, row) in enumerate(series, 1):
        plots.append("'%s' using 1:2 with lines lw 2 lc %d title '%s RSS'" % (dat, n, row))
        plots.append("'%s' using 1:($3) with linespoints dt 2 pt 1 ps 0.5 lc %d "
                     "title '%s PSS'" % (dat, n, row))
    if shrinks:
        sdat = '%s-shrinks.dat' % w.name
        with open(os.path.join(outdir, sdat), 'w') as f:
            f.write('# t_s rss_mib allocator\n')
            for t, m, row in shrinks:
                f.write('%.3f %.3f %s\n' % (t, m, row))
        plots.append("'%s' using 1:2 with points pt 7 ps 1.6 lc rgb 'black' "
                     "title 'shrink pass'" % sdat)
    gp = '%s.gp' % w.name
    png = '%s.png' % w.name
    with open(os.path.join(outdir, gp), 'w') as f:
        f.write('# gnuplot script written by scripts/compare; run: gnuplot %s\n' % gp)
        f.write("set terminal TERM size 1100,650 noenhanced\n")
        f.write("set output '%s'\n" % png)
        f.write("set title '%s: RSS (solid), PSS (dashed), run 1; dots: shrinker "
                "passes that released memory'\n" % w.name)
        f.write("set xlabel 'time since start (s)'\nset ylabel 'MiB'\nset datafile missing '?'\n")
        f.write("set key outside right top\nset grid\nset yrange [0:*]\n")
        f.write('plot ' + ', \\\n     '.join(plots) + '\n')
    for term in ('pngcairo', 'png'):
        with open(os.path.join(outdir, gp)) as f:
            text = f.read()
        text = re.sub(r'set terminal \S+', 'set terminal ' + term, text, count=1)
        with open(os.path.join(outdir, gp), 'w') as f:
            f.write(text)
        res = subprocess.run(['gnuplot', gp], cwd=outdir, capture_output=True, text=True)
        if res.returncode == 0 and os.path.exists(os.path.join(outdir, png)):
            return png
    say('gnuplot failed for %s: %s' % (w.name, (res.stderr.strip().splitlines() or ['?'])[-1]))
    return None
