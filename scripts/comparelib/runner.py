"""scripts/comparelib/runner.py - one run of a program: spawn it in its own
process group, sample /proc/PID/status (and smaps_rollup's Pss) while it
runs, reap it, and collect its figures (key=value and event= lines of its
output).  Children still alive are killed by kill_children()."""
import os
import re
import signal
import subprocess
import threading
import time

KV_RE = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*=\S*$')

LIVE_CHILDREN = set()          # Popen objects to kill on the way out


# --------------------------------------------------------------- cleanup

class Terminated(Exception):
    pass


def on_signal(signum, frame):
    raise Terminated(signal.Signals(signum).name)


def kill_children():
    for p in list(LIVE_CHILDREN):
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=5)
        except Exception:
            pass
        LIVE_CHILDREN.discard(p)


# --------------------------------------------------------------- sampling

def read_status(pid):
    """(VmRSS kB, VmHWM kB) of pid, or None if gone or a zombie."""
    try:
        with open('/proc/%d/status' % pid, 'rb') as f:
            data = f.read()
    except OSError:
        return None
    rss = hwm = None
    for line in data.split(b'\n'):
        if line.startswith(b'VmRSS:'):
            rss = int(line.split()[1])
        elif line.startswith(b'VmHWM:'):
            hwm = int(line.split()[1])
    if rss is None:
        return None
    return rss, hwm if hwm is not None else rss


def read_pss_kb(pid):
    """Pss of pid in kB from /proc/PID/smaps_rollup, or None.  Unlike VmRSS
    it counts a page mapped at two addresses (a mesh) once."""
    try:
        with open('/proc/%d/smaps_rollup' % pid, 'rb') as f:
            for line in f:
                if line.startswith(b'Pss:'):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


# PSS is read every PSS_EVERY-th sample: smaps_rollup walks the page
# tables, a few ms for a few hundred MiB.
PSS_EVERY = 4


class Sampler(threading.Thread):
    """Samples /proc/PID/status every `interval` s until stop(), and
    /proc/PID/smaps_rollup's Pss every PSS_EVERY-th time."""

    def __init__(self, pid, t0, interval):
        super().__init__(daemon=True)
        self.pid, self.t0, self.interval = pid, t0, interval
        self.samples = []          # (t s since t0, rss kB, hwm kB, pss kB or None)
        self._halt = threading.Event()

    def run(self):
        nxt = time.monotonic()
        n = 0
        while not self._halt.is_set():
            st = read_status(self.pid)
            now = time.monotonic()
            if st is not None:
                pss = read_pss_kb(self.pid) if n % PSS_EVERY == 0 else None
                n += 1
                self.samples.append((now - self.t0, st[0], st[1], pss))
            nxt += self.interval
            delay = nxt - time.monotonic()
            if delay < 0:
                nxt = time.monotonic()
                delay = 0
            self._halt.wait(delay)

    def stop(self):
        self._halt.set()
        self.join()


def parse_output(paths, t0):
    """key=value figures and (event, t) from the program's output files."""
    metrics, events = {}, []
    for path in paths:
        try:
            with open(path, errors='replace') as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        for line in lines:
            toks = line.split()
            if not toks or not all(KV_RE.match(t) for t in toks):
                continue
            kv = dict(t.split('=', 1) for t in toks)
            if 'event' in kv and 'mono' in kv:
                try:
                    events.append((kv['event'], float(kv['mono']) - t0))
                except ValueError:
                    pass
                continue
            metrics.update(kv)
    return metrics, events


def tail(path, n=3):
    try:
        with open(path, errors='replace') as f:
            lines = [l.rstrip() for l in f.read().splitlines() if l.strip()]
    except OSError:
        return ''
    return ' | '.join(lines[-n:])


# --------------------------------------------------------------- one run

class RunResult:
    def __init__(self):
        self.ok = False
        self.status = ''
        self.wall = None
        self.peak_kb = None
        self.final_kb = None
        self.samples = []
        self.metrics = {}
        self.events = []
        self.note = ''


def spawn(argv, env, out_path, err_path):
    fo = open(out_path, 'wb')
    fe = open(err_path, 'wb')
    try:
        p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                             stdout=fo, stderr=fe, start_new_session=True)
    finally:
        fo.close()
        fe.close()
    LIVE_CHILDREN.add(p)
    return p


def reap(p, timeout, progress, t0):
    """Wait for p with wait4(); (status, ru_maxrss kB, timed_out)."""
    last_tick = time.monotonic()
    timed_out = False
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            LIVE_CHILDREN.discard(p)
            return p.returncode, ru.ru_maxrss, timed_out
        now = time.monotonic()
        if not timed_out and now - t0 > timeout:
            timed_out = True
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if progress and now - last_tick >= 10:
            last_tick = now
            progress(now - t0)
        time.sleep(0.01)


def describe_exit(rc):
    if rc is None:
        return 'did not start'
    if rc < 0:
        try:
            return 'killed by ' + signal.Signals(-rc).name
        except ValueError:
            return 'killed by signal %d' % -rc
    return 'exit status %d' % rc


def run_command(argv, env, logbase, interval, timeout, progress):
    r = RunResult()
    out_path, err_path = logbase + '.out', logbase + '.err'
    t0 = time.monotonic()
    try:
        p = spawn(argv, env, out_path, err_path)
    except OSError as e:
        r.status = 'cannot start %s: %s' % (argv[0], e.strerror)
        return r
    s = Sampler(p.pid, t0, interval)
    s.start()
    rc, maxrss, timed_out = reap(p, timeout, progress, t0)
    r.wall = time.monotonic() - t0
    s.stop()
    r.samples = s.samples
    r.metrics, r.events = parse_output([out_path, err_path], t0)
    finish(r, maxrss)
    if timed_out:
        r.status = 'timed out after %d s (killed)' % timeout
    elif rc != 0:
        r.status = describe_exit(rc)
        t = tail(err_path)
        if t:
            r.status += ': ' + t
    else:
        r.ok = True
        r.status = 'ok'
    return r


def to_int(v):
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return None


def finish(r, maxrss):
    # maxrss (wait4's ru_maxrss) is deliberately not used: Linux carries it
    # across execve(), so it includes this Python process's RSS at fork.
    peaks = []
    if r.samples:
        peaks.append(r.samples[-1][2])
        peaks.append(max(x[1] for x in r.samples))
    own_peak = to_int(r.metrics.get('peak_rss_kb'))
    if own_peak:
        peaks.append(own_peak)
    r.peak_kb = max(peaks) if peaks else None
    own_final = to_int(r.metrics.get('final_rss_kb'))
    if own_final:
        r.final_kb = own_final
    elif r.samples and r.final_kb is None:
        r.final_kb = r.samples[-1][1]
    live = to_int(r.metrics.get('live_bytes'))
    if live and r.final_kb and 'rss_per_live' not in r.metrics:
        r.metrics['rss_per_live'] = '%.3f' % (r.final_kb * 1024.0 / live)



def stop_and_reap(p, grace):
    """Wait up to grace s for p (after SHUTDOWN), then SIGTERM, SIGKILL;
    reap it with wait4() and return its ru_maxrss (kB)."""
    end = time.monotonic() + grace
    sent = None
    while True:
        if p.returncode is not None:      # already reaped by poll()
            LIVE_CHILDREN.discard(p)
            return None
        try:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        except ChildProcessError:
            LIVE_CHILDREN.discard(p)
            return None
        if pid == p.pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            LIVE_CHILDREN.discard(p)
            return ru.ru_maxrss
        now = time.monotonic()
        if now > end and sent is None:
            sent = signal.SIGTERM
            os.killpg(p.pid, signal.SIGTERM)
            end = now + 5
        elif now > end and sent == signal.SIGTERM:
            sent = signal.SIGKILL
            os.killpg(p.pid, signal.SIGKILL)
        time.sleep(0.02)


