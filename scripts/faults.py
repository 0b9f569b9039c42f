#!/usr/bin/env python3
"""The fault-injection suite of docs/reliability.md: faults injected into real
runs of the actkit CLI, each outcome classified.

Fault kinds:

  kill-rank      a rank of `actkit pipeline` (fp32, directq, aqsgd, --dp) or
                 `actkit dp` killed (SIGKILL, SIGTERM, SIGSEGV, SIGABRT) right
                 after it starts, mid-training, while it writes a checkpoint,
                 between two ranks' commits of one, or after the last step;
                 then the run resumed from what the folder holds
  kill-launcher  the launcher itself sent SIGTERM, SIGINT or SIGKILL: no rank
                 may outlive it
  stop-rank      a rank stopped (SIGSTOP): the run must end within twice the
                 timeout (and the launcher's grace); SIGCONT afterwards
  stop-launcher  (full run only) a rank stopped, then its launcher killed:
                 the stopped rank must not outlive it
  full-disk      --save of pipeline, dp or train, AQ-SGD's buffer stores or
                 --json on a small tmpfs of a private mount namespace (free
                 space a fraction of a checkpoint); then the earlier
                 checkpoint resumed
  corrupt        bits flipped in, or a cut of, a checkpoint file (pipeline
                 stage and optimizer files, AQ-SGD stores, dp's and train's
                 model.pt and optimizer files, DIR/latest), then loaded with
                 --resume or --init
  misuse         what a careful user may do by mistake: SIGTERM or SIGINT to
                 a launcher while it starts 12 ranks (none may outlive it);
                 --json onto a character device, a FIFO or a link (the node
                 must stay what it was); --save into a folder of someone
                 else's files named like ACTkit's (refused, every file
                 intact); a tokenizer.json whose Split pattern backtracks
                 without bound (a clear error within its bound)

Each checkpoint's results are compared with an undisturbed run's (the JSON's
train_losses and validation loss): a resume is bit for bit,
so any difference is corruption. The suite runs a copy of the binary (and of
libactkit), so a rebuild while it runs changes nothing under it.

Outcomes: clean (a nonzero exit in time with an error message), recovered (the
run, or its resume, succeeded with the results of an undisturbed run), hang (a
run past its bound, or a rank outliving its launcher), crash (a signal the
suite did not send, "terminate called", a sanitizer report), lost (a
checkpoint that was whole before the fault does not resume), silent (a run
that succeeded with other results than the undisturbed one).

The last line printed is the summary; the exit status is 0 only when there
were no hangs, crashes, lost checkpoints or silent corruptions (2: the suite
itself could not run). Standard library only; run as root for the full-disk
faults (mount namespaces) and for the kernel's process events, which give
every rank's exit status (without them crashes are found from the launcher's
status and the output alone).
"""

import argparse
import collections
import ctypes
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
libc = ctypes.CDLL(None, use_errno=True)

SIGNALS = {s.value: s.name for s in signal.Signals}
# Deaths by these are the launcher's doing (it stops the ranks it gives up
# on) or the kernel's (PR_SET_PDEATHSIG): not crashes.
BENIGN = {signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
CRASH_TEXT = re.compile(
    r"terminate called|Segmentation fault|AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer|"
    r"runtime error: |core dumped|stack smashing|double free|free\(\): |malloc\(\): |corrupted size|"
    r"pure virtual method called|Fatal glibc error")

# The launcher's line naming the rank that failed first.
LAUNCHER_SUMMARY = re.compile(r"^actkit: error: (pipeline|dp): rank \d+ (failed first|was killed)|"
                              r"rank \d+ failed \(its own error says why\)|failed before it \(its error is its own\)")

# The small model every run trains.
MODEL = ["--model", "gpt2", "--layers", "1", "--hidden", "64", "--heads", "2", "--seq-len", "32"]


def signame(sig):
    return SIGNALS.get(sig, str(sig))


def status_text(status):
    if os.WIFSIGNALED(status):
        return "signal " + signame(os.WTERMSIG(status)) + (" (core)" if status & 0x80 else "")
    if os.WIFEXITED(status):
        return "exit %d" % os.WEXITSTATUS(status)
    return "status %d" % status


# --------------------------------------------------------------------------
# The processes of a run: /proc, and the kernel's process events.

def children_of(pid):
    kids = []
    try:
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


def rank_of(pid):
    """RANK from a process's environment (None before its exec, or gone)."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for e in env:
        if e.startswith(b"RANK="):
            try:
                return int(e[5:])
            except ValueError:
                return None
    return None


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def reap(pid):
    """Collects an orphan that came to this process (a child subreaper)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def send(pid, sig):
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


class ProcWatch(threading.Thread):
    """Every descendant of this process and how it ended, from the kernel's
    process-event connector (netlink; needs root in the first network
    namespace). available is False where it cannot be had."""

    def __init__(self):
        super().__init__(daemon=True)
        self.lock = threading.Lock()
        self.parent = {}
        self.exits = {}
        self.tracked = {os.getpid()}
        self.available = False
        self.overflowed = False
        self.sock = None
        try:
            s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 11)  # NETLINK_CONNECTOR
            try:
                s.setsockopt(socket.SOL_SOCKET, 33, 32 << 20)  # SO_RCVBUFFORCE
            except OSError:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            s.bind((0, 1))  # CN_IDX_PROC
            op = struct.pack("I", 1)  # PROC_CN_MCAST_LISTEN
            cn = struct.pack("IIIIHH", 1, 1, 0, 0, len(op), 0) + op
            s.send(struct.pack("IHHII", 16 + len(cn), 3, 0, 0, 0) + cn)  # NLMSG_DONE
            self.sock = s
        except OSError:
            return
        self.start()
        probe = subprocess.Popen(["true"])
        probe.wait()
        end = time.monotonic() + 2
        while time.monotonic() < end:
            with self.lock:
                if probe.pid in self.exits:
                    self.available = True
                    return
            time.sleep(0.01)

    def run(self):
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                self.overflowed = True  # ENOBUFS: events were dropped
                continue
            off = 0
            while off + 16 <= len(data):
                length = struct.unpack_from("I", data, off)[0]
                if length < 16:
                    break
                self.event(data[off:off + length])
                off += (length + 3) & ~3

    def event(self, msg):
        if len(msg) < 52 + 16:
            return
        what = struct.unpack_from("I", msg, 36)[0]
        if what == 0x1:  # PROC_EVENT_FORK
            ppid, ptgid, cpid, ctgid = struct.unpack_from("IIII", msg, 52)
            if cpid != ctgid:
                return  # a thread
            with self.lock:
                if ptgid in self.tracked:
                    self.tracked.add(cpid)
                    self.parent[cpid] = ptgid
                    self.exits.pop(cpid, None)
                elif cpid in self.tracked:  # a reused pid
                    self.tracked.discard(cpid)
                    self.parent.pop(cpid, None)
                    self.exits.pop(cpid, None)
        elif what == 0x80000000:  # PROC_EVENT_EXIT
            pid, tgid, code, _ = struct.unpack_from("IIII", msg, 52)
            if pid != tgid:
                return
            with self.lock:
                if pid in self.tracked:
                    self.exits[pid] = code

    def descendants(self, root):
        with self.lock:
            out = []
            for pid in self.tracked:
                p = pid
                while p in self.parent:
                    p = self.parent[p]
                    if p == root:
                        out.append(pid)
                        break
            return out

    def status(self, pid):
        with self.lock:
            return self.exits.get(pid)

    def forget(self, pids):
        with self.lock:
            for p in pids:
                self.tracked.discard(p)
                self.parent.pop(p, None)
                self.exits.pop(p, None)


class Inotify:
    """Creations and renames in a checkpoint folder and in its step-<N>
    folders (a save's own folder), as they happen; events carry the file's
    name without its folder."""
    IN_MOVED_TO, IN_CREATE, IN_ISDIR = 0x80, 0x100, 0x40000000

    def __init__(self, path):
        self.fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.top = self.add(path)
        if self.top < 0:
            e = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(e, "inotify_add_watch " + path)
        self.path = path
        self.pending = []
        for name in os.listdir(path):  # step folders already there (a resumed run's)
            if re.match(r"step-\d+$", name):
                self.add(os.path.join(path, name))

    def add(self, path):
        return libc.inotify_add_watch(self.fd, path.encode(), self.IN_MOVED_TO | self.IN_CREATE)

    def read(self):
        events, self.pending = self.pending, []
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return events
            off = 0
            while off + 16 <= len(buf):
                wd, mask, _, n = struct.unpack_from("iIII", buf, off)
                name = buf[off + 16:off + 16 + n].rstrip(b"\0").decode(errors="replace")
                off += 16 + n
                if mask & self.IN_ISDIR:
                    if wd == self.top and mask & self.IN_CREATE and re.match(r"step-\d+$", name):
                        sub = os.path.join(self.path, name)
                        if self.add(sub) >= 0:
                            # What the save wrote before the watch was there.
                            try:
                                for f in sorted(os.listdir(sub)):
                                    events.append((self.IN_CREATE if ".tmp." in f else self.IN_MOVED_TO, f))
                            except OSError:
                                pass
                    continue
                events.append((mask, name))

    def close(self):
        os.close(self.fd)


def has_checkpoint(ckpt, expected):
    """Whether a --save folder holds anything a resume would read: a commit
    (DIR/latest), or a flat folder's files."""
    return os.path.exists(os.path.join(ckpt, "latest")) or any(
        os.path.exists(os.path.join(ckpt, f)) for f in expected)


def read_files(ckpt):
    """The files of a checkpoint folder a resume reads (relative paths): with
    a commit, DIR/latest and the step folder it names (and AQ-SGD's stores);
    else every file."""
    everything = sorted(os.path.relpath(os.path.join(r, f), ckpt) for r, _, fs in os.walk(ckpt) for f in fs
                        if f != ".actkit-lock")
    try:
        with open(os.path.join(ckpt, "latest")) as f:
            step = f.read().strip()
    except OSError:
        return everything
    return [f for f in everything if f == "latest" or f.startswith(step + "/") or f.startswith("buffers/")]


# --------------------------------------------------------------------------
# One run of the CLI, with a fault injected at a point.

class Files:
    """What a checkpoint folder went through during a run: per final file
    name, how many times a temporary of it was created (and by which pid)
    and how many times it was renamed into place."""

    def __init__(self):
        self.created = collections.Counter()
        self.writer = {}
        self.moved = collections.Counter()

    def note(self, mask, name):
        if ".tmp." in name:
            if mask & Inotify.IN_CREATE:
                base, rest = name.split(".tmp.", 1)
                self.created[base] += 1
                try:
                    self.writer[base] = int(rest.split(".")[0])
                except ValueError:
                    pass
            return None
        if mask & Inotify.IN_MOVED_TO:
            self.moved[name] += 1
            return name
        return None

    def complete(self, expected):
        """Checkpoints committed: DIR/latest renamed into place (a folder
        with commits), else the saves every expected file was renamed into
        place for (a flat folder)."""
        if self.moved["latest"] or self.created["latest"]:
            return self.moved["latest"]
        return min(self.moved[f] for f in expected) if expected else 0


class Trigger:
    """Sends `sig` to `who` once `when` is met, `delay` seconds later.

    when: ("start",) as soon as the rank exists (before the rendezvous);
    ("step", k) once rank 0 reported step k; ("save", n[, file]) when the
    temporary of a checkpoint file (of `file`) appears for the n-th time;
    ("commit", n[, file]) when a checkpoint file (`file`) is renamed into
    place for the n-th time. who: a rank number, "launcher", "writer" (the
    rank writing that temporary), "committer" (the rank that renamed that
    file), "pending" (a rank that has not renamed its files of that save)."""

    def __init__(self, when, who, sig, delay=0.0, then=None):
        self.when, self.who, self.sig, self.delay = when, who, sig, delay
        self.then = then  # a signal for the launcher right after (stop-launcher)
        self.armed_at = None
        self.pid = None
        self.fired = False
        self.note = ""

    def describe(self):
        w = self.when[0] + "".join(":%s" % x for x in self.when[1:])
        who = self.who if isinstance(self.who, str) else "rank%d" % self.who
        return "%s/%s@%s+%dms" % (who, signame(self.sig), w, int(self.delay * 1000))

    def target_rank(self, ctx):
        if self.who == "launcher":
            return ctx.launcher
        return ctx.pid_of_rank.get(self.who)

    def poll(self, ctx, events):
        if self.fired:
            return
        if self.armed_at is None:
            kind = self.when[0]
            if kind == "start":
                pid = self.target_rank(ctx) if isinstance(self.who, int) or self.who == "launcher" else None
                if pid:
                    self.armed_at, self.pid = ctx.now, pid
            elif kind == "step":
                if ctx.max_step >= self.when[1]:
                    self.armed_at = ctx.now
            elif kind == "save":
                only = self.when[2] if len(self.when) > 2 else None
                for mask, name in events:
                    if mask & Inotify.IN_CREATE and ".tmp." in name:
                        base = name.split(".tmp.", 1)[0]
                        if ctx.files.created[base] == self.when[1] and (only is None or base == only):
                            self.armed_at = ctx.now
                            if self.who == "writer":
                                self.pid = ctx.files.writer.get(base)
                            self.note = "writing " + base
                            break
            elif kind == "commit":
                only = self.when[2] if len(self.when) > 2 else None
                for mask, name in events:
                    if (mask & Inotify.IN_MOVED_TO and ".tmp." not in name and ctx.files.moved[name] == self.when[1]
                            and (only is None or name == only)):
                        self.armed_at = ctx.now
                        pending = [ctx.files.writer[f] for f in ctx.files.writer
                                   if ctx.files.moved[f] < self.when[1] and ctx.files.writer[f] in ctx.ranks]
                        committer = ctx.files.writer.get(name)
                        others = [p for p in ctx.ranks if p != committer]
                        if isinstance(self.who, int):
                            choice = [p for p in ctx.ranks if ctx.ranks[p] == self.who]
                        elif self.who == "committer" and committer in ctx.ranks:
                            choice = [committer]
                        else:
                            choice = pending or others
                        self.pid = ctx.rng.choice(sorted(choice)) if choice else None
                        self.note = "after %s committed" % name
                        break
        if self.armed_at is not None and ctx.now - self.armed_at >= self.delay:
            pid = self.pid or (self.target_rank(ctx) if isinstance(self.who, int) or self.who == "launcher" else None)
            if pid is None and self.who in ("writer", "pending", "committer") and ctx.ranks:
                pid = ctx.rng.choice(sorted(ctx.ranks))
            if pid is None:
                return
            if ctx.signal(pid, self.sig):
                self.fired = True
                who = "launcher" if pid == ctx.launcher else "rank %s" % ctx.ranks.get(pid)
                self.note = ("%s; " % self.note if self.note else "") + "%s to %s at %.2fs" % (
                    signame(self.sig), who, ctx.now)
                self.pid = pid
                if self.then:
                    ctx.signal(ctx.launcher, self.then)
                    self.note += ", then %s to the launcher" % signame(self.then)


class Run:
    def __init__(self):
        self.rc = None
        self.seconds = 0.0
        self.hung = False
        self.orphans = []
        self.out = ""
        self.err = ""
        self.statuses = {}
        self.sent = collections.defaultdict(set)
        self.ranks = {}
        self.launcher = None
        self.files = Files()
        self.bound = 0
        self.fired_at = None
        self.states = []
        self.trigger = None


class Ctx:
    def __init__(self, run, rng):
        self.run = run
        self.rng = rng
        self.now = 0.0
        self.launcher = None
        self.ranks = {}
        self.pid_of_rank = {}
        self.max_step = 0
        self.files = run.files

    def signal(self, pid, sig):
        ok = send(pid, sig)
        if ok:
            self.run.sent[pid].add(sig)
        return ok


class Suite:
    def __init__(self, args):
        self.args = args
        self.seed = args.seed
        self.rng = random.Random(args.seed)
        self.work = tempfile.mkdtemp(prefix="actkit-faults-")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.logdir = args.log_dir or os.path.join(tempfile.gettempdir(), "actkit-faults-%s-seed%d" % (stamp, args.seed))
        os.makedirs(self.logdir, exist_ok=True)
        self.log_path = os.path.join(self.logdir, "faults.log")
        self.log = open(self.log_path, "w")
        self.counter = 0
        self.dirs = 0
        self.holders = []
        self.current = None
        self.tally = collections.Counter()
        self.notes = collections.Counter()
        self.missed = 0
        self.watch = ProcWatch()
        self.can_mount = os.geteuid() == 0 and shutil.which("unshare") and shutil.which("nsenter")
        self.binary = self.snapshot(args.binary)
        tmp = os.path.join(self.work, "tmp")
        os.makedirs(tmp)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                                 "ACTKIT_PARENT_PID", "ACTKIT_NETNS", "ACTKIT_COMM_TIMEOUT", "OMP_NUM_THREADS")}
        self.env["TMPDIR"] = tmp  # AQ-SGD's temporary stores of killed runs land here
        if self.libdir:
            self.env["LD_LIBRARY_PATH"] = self.libdir + (
                ":" + os.environ["LD_LIBRARY_PATH"] if os.environ.get("LD_LIBRARY_PATH") else "")
        self.pdeath = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
        self.refs = {}
        self.bases = {}
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphaned ranks come here
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core files from the ranks we signal

    # -- the binary ---------------------------------------------------------
    def snapshot(self, binary):
        """A copy of the binary and of ACTkit's own libraries, so that a
        rebuild while the suite runs changes nothing under it."""
        self.libdir = None
        binary = os.path.abspath(binary)
        if not os.access(binary, os.X_OK):
            raise SystemExit("faults: no executable at %s" % binary)
        bindir = os.path.join(self.work, "bin")
        os.makedirs(bindir)
        copy = os.path.join(bindir, "actkit")
        shutil.copy2(binary, copy)
        try:
            out = subprocess.run(["ldd", binary], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            return copy
        libs = re.findall(r"^\s*(libactkit\S*)\s+=>\s+(\S+)", out, re.M)
        if libs:
            self.libdir = os.path.join(self.work, "lib")
            os.makedirs(self.libdir)
            for name, path in libs:
                shutil.copy2(path, os.path.join(self.libdir, name))
        return copy

    # -- running ------------------------------------------------------------
    def execute(self, argv, bound, trigger=None, after=None, watch=None, rng=None, ns=None, tag="run"):
        """Runs argv (the CLI's arguments; in the mount namespace of holder
        `ns` when given) to its end, injecting `trigger`. A run still going
        `bound` seconds after it started, or `after` seconds after the
        trigger fired, has hung."""
        self.counter += 1
        run = Run()
        run.bound = bound
        fired_at = None
        run.trigger = trigger
        prefix = os.path.join(self.work, "run%05d-%s" % (self.counter, tag))
        full = self.pdeath + (["nsenter", "-t", str(ns), "-m", "--"] if ns else []) + [self.binary] + argv
        inotify = Inotify(watch) if watch else None
        ctx = Ctx(run, rng or self.rng)
        out_f, err_f = open(prefix + ".out", "wb"), open(prefix + ".err", "wb")
        t0 = time.monotonic()
        p = subprocess.Popen(full, stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL, cwd=self.work,
                             env=self.env, start_new_session=True)
        out_f.close()
        err_f.close()
        self.current = p
        run.launcher = ctx.launcher = p.pid
        out_pos = 0
        seen = set()
        try:
            while True:
                ctx.now = time.monotonic() - t0
                if p.poll() is not None:
                    break
                if trigger and trigger.fired and fired_at is None:
                    fired_at = ctx.now
                    run.fired_at = fired_at
                    if after is not None:
                        bound = fired_at + after
                        run.bound = bound
                if ctx.now > bound:
                    run.hung = True
                    run.states = self.rank_states(ctx)
                    self.kill_all(p.pid, list(ctx.ranks) + self.watch.descendants(p.pid), run)
                    p.wait()
                    break
                for kid in children_of(p.pid):
                    if kid not in ctx.ranks:
                        r = rank_of(kid)
                        if r is not None:
                            ctx.ranks[kid] = r
                            ctx.pid_of_rank[r] = kid
                        seen.add(kid)
                # ACTkit's ownership markers (.actkit-step, .actkit-checkpoints)
                # are no part of a checkpoint's files: faults aim at those.
                events = [e for e in inotify.read() if not e[1].startswith(".actkit-")] if inotify else []
                for mask, name in events:
                    run.files.note(mask, name)
                if trigger and not trigger.fired and trigger.when[0] == "step":
                    # Rank 0's progress lines ("step k/N ...") go to stderr.
                    with open(prefix + ".err", "rb") as f:
                        f.seek(out_pos)
                        chunk = f.read()
                    nl = chunk.rfind(b"\n")
                    if nl >= 0:
                        out_pos += nl + 1
                        for m in re.finditer(rb"step (\d+)/\d+", chunk[:nl]):
                            ctx.max_step = max(ctx.max_step, int(m.group(1)))
                if trigger:
                    trigger.poll(ctx, events)
                if inotify:
                    select.select([inotify.fd], [], [], 0.004)
                else:
                    time.sleep(0.004)
            run.rc = p.returncode
            run.seconds = time.monotonic() - t0
            # Every rank must be gone soon after its launcher (PR_SET_PDEATHSIG).
            procs = set(ctx.ranks) | seen | set(self.watch.descendants(p.pid))
            deadline = time.monotonic() + self.args.orphan_s
            while True:
                for q in procs:
                    reap(q)
                left = [q for q in procs if alive(q) and self.watch.status(q) is None]
                if not left or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            if left:
                run.orphans = ["%d (rank %s)" % (q, ctx.ranks.get(q, "?")) for q in left]
                self.kill_all(None, left, run)
            if inotify:
                for mask, name in inotify.read():
                    run.files.note(mask, name)
            time.sleep(0.02)  # the last exit events
            for q in procs | {p.pid}:
                st = self.watch.status(q)
                if st is not None:
                    run.statuses[q] = st
            self.watch.forget(procs | {p.pid})
        finally:
            if p.poll() is None:
                self.kill_all(p.pid, [], run)
                p.wait()
            self.current = None
            if inotify:
                inotify.close()
        run.ranks = dict(ctx.ranks)
        with open(prefix + ".out", errors="replace") as f:
            run.out = f.read()
        with open(prefix + ".err", errors="replace") as f:
            run.err = f.read()
        os.unlink(prefix + ".out")
        os.unlink(prefix + ".err")
        return run

    def rank_states(self, ctx):
        """Where each rank is when a run is declared hung."""
        out = []
        for pid, r in sorted(ctx.ranks.items(), key=lambda x: x[1]):
            st = self.watch.status(pid)
            if st is not None:
                out.append("rank %d: %s" % (r, status_text(st)))
                continue
            try:
                with open("/proc/%d/stat" % pid) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
                with open("/proc/%d/wchan" % pid) as f:
                    wchan = f.read().strip()
                out.append("rank %d: %s" % (r, {"T": "stopped", "Z": "ended"}.get(state, "running (%s)" % wchan)))
            except (OSError, IndexError):
                out.append("rank %d: ended" % r)
        return out

    def kill_all(self, group, pids, run):
        for q in pids:
            send(q, signal.SIGCONT)
        if group:
            try:
                os.killpg(group, signal.SIGCONT)
                os.killpg(group, signal.SIGKILL)
                run.sent[group].add(signal.SIGKILL)
            except ProcessLookupError:
                pass
        for q in pids:
            if send(q, signal.SIGKILL):
                run.sent[q].add(signal.SIGKILL)
        for q in pids:
            end = time.monotonic() + 5
            while alive(q) and time.monotonic() < end:
                reap(q)
                time.sleep(0.01)
            reap(q)

    # -- judging ------------------------------------------------------------
    def verdict(self, run):
        """hang, crash or None, with what was seen."""
        if run.hung:
            where = ["; ".join(run.states)] if run.states else []
            if run.fired_at is not None:
                return "hang", ["still running %.0fs after the fault (%.0fs in all)" % (
                    run.bound - run.fired_at, run.bound)] + where
            return "hang", ["still running after %.0fs" % run.bound] + where
        if run.orphans:
            return "hang", ["outlived the launcher by %gs: %s" % (self.args.orphan_s, ", ".join(run.orphans))]
        seen = []
        if run.rc is not None and run.rc < 0 and -run.rc not in run.sent.get(run.launcher, ()):
            seen.append("the launcher died of " + signame(-run.rc))
        for pid, st in run.statuses.items():
            if pid == run.launcher or not os.WIFSIGNALED(st):
                continue
            sig = os.WTERMSIG(st)
            if sig in run.sent.get(pid, ()) or (sig in BENIGN and not st & 0x80):
                continue
            seen.append("rank %s (pid %d) died of %s" % (run.ranks.get(pid, "?"), pid, status_text(st)))
        m = CRASH_TEXT.search(run.err) or CRASH_TEXT.search(run.out)
        if m:
            seen.append("output: " + m.group(0).strip())
        if seen:
            return "crash", seen
        return None, []

    @staticmethod
    def error_line(run):
        """The first error a rank printed (the launcher's summary only if
        there is none), shortened."""
        lines = [l for l in run.err.splitlines() if "error" in l.lower()]
        own = [l for l in lines if not LAUNCHER_SUMMARY.search(l)]
        pick = own[0] if own else (lines[-1] if lines else "")
        return pick[:400]

    @staticmethod
    def difference(a, b):
        """How far two runs' results are apart: None when the same, else the
        largest relative difference of the JSON's losses (every step's and
        the validation's), or a word. The training is bit for bit; the reported per-step loss of
        `dp` with 3 or more workers is a float32 allreduce whose order of
        summation depends on the run's length, hence the 1e-6."""
        if "train_losses" in a or "train_losses" in b:
            if a.get("start_step") != b.get("start_step"):
                return "start step %s, not %s" % (a.get("start_step"), b.get("start_step"))
            xs = list(a.get("train_losses") or []) + [a.get("val_loss", a.get("final_validation_loss"))]
            ys = list(b.get("train_losses") or []) + [b.get("val_loss", b.get("final_validation_loss"))]
        else:
            xs = [a.get("final_train_loss"), a.get("final_validation_loss")]
            ys = [b.get("final_train_loss"), b.get("final_validation_loss")]
        if len(xs) != len(ys) or any(x is None or y is None for x, y in zip(xs, ys)):
            return "other steps"
        worst = 0.0
        for x, y in zip(xs, ys):
            if x != y:
                worst = max(worst, abs(x - y) / max(abs(y), 1e-30)) if x == x and y == y else float("inf")
        return None if worst <= 1e-6 else "losses differ by up to %.3g (relative)" % worst

    @classmethod
    def same(cls, a, b):
        return cls.difference(a, b) is None

    @staticmethod
    def tail_of(ref, start):
        """What a run resumed at `start` must report: the reference's steps from there."""
        t = dict(ref)
        t["start_step"] = start
        t["train_losses"] = ref["train_losses"][start:]
        return t

    # -- the configurations ---------------------------------------------------
    def configs(self):
        t = ["--timeout", str(self.args.rank_timeout)]
        pipe = ["pipeline"] + MODEL + ["--micro-batches", "2", "--micro-batch-size", "2", "--validation-batches", "1"]
        return {
            "pipeline-2": dict(kind="pipeline", stages=2, replicas=1, steps=30, every=5, resume_steps=34,
                               args=pipe + ["--stages", "2", "--data", "synthetic", "--train-limit", "32"] + t),
            "pipeline-3": dict(kind="pipeline", stages=3, replicas=1, steps=24, every=4, resume_steps=28,
                               args=pipe + ["--stages", "3", "--schedule", "gpipe", "--codec", "directq",
                                            "--fw-bits", "4", "--data", "fortunes", "--train-limit", "64"] + t),
            "aqsgd-2": dict(kind="pipeline", stages=2, replicas=1, steps=30, every=4, resume_steps=34,
                            args=["pipeline"] + MODEL + [
                                "--stages", "2", "--micro-batches", "2", "--micro-batch-size", "4", "--codec",
                                "aqsgd", "--fw-bits", "2", "--bw-bits", "8", "--warmup-epochs", "1",
                                "--buffer-memory", "64KiB", "--data", "synthetic", "--train-limit", "32",
                                "--validation-batches", "1"] + t),
            "aqsgd-3": dict(kind="pipeline", stages=3, replicas=1, steps=24, every=4, resume_steps=28,
                            args=["pipeline"] + MODEL + [
                                "--stages", "3", "--micro-batches", "2", "--micro-batch-size", "4", "--codec",
                                "aqsgd", "--fw-bits", "2", "--bw-bits", "8", "--warmup-epochs", "1",
                                "--buffer-memory", "0", "--buffer-format", "q8", "--check-buffers",
                                "--data", "fortunes", "--train-limit", "32", "--validation-batches", "1"] + t),
            "pipeline-dp": dict(kind="pipeline", stages=2, replicas=2, steps=16, every=4, resume_steps=20,
                                args=pipe + ["--stages", "2", "--dp", "2", "--codec", "tah", "--optimizer",
                                             "onebit-adam", "--dp-warmup-steps", "3", "--data", "synthetic",
                                             "--train-limit", "64"] + t),
            "dp-2": dict(kind="dp", ranks=2, base_steps=6, steps=24, resume_steps=28,
                         args=["dp"] + MODEL + ["--workers", "2", "--optimizer", "onebit-adam", "--warmup-steps", "2",
                                                "--lr-schedule", "constant", "--data", "synthetic", "--train-limit",
                                                "64", "--batch", "4"] + t),
            "dp-3": dict(kind="dp", ranks=3, base_steps=6, steps=20, resume_steps=24,
                         args=["dp"] + MODEL + ["--workers", "3", "--optimizer", "adam", "--lr-schedule", "constant",
                                                "--data", "fortunes", "--train-limit", "96", "--batch", "4"] + t),
            "train": dict(kind="train", ranks=1, base_steps=2, steps=4, resume_steps=6,
                          args=["train"] + MODEL + ["--data", "synthetic", "--train-limit", "16", "--batch", "8",
                                                    "--lr-schedule", "constant",
                                                    "--level", "L0", "--no-compare"]),
        }

    def expected_files(self, cfg):
        if cfg["kind"] in ("dp", "train"):
            return ["model.pt"] + ["optimizer-rank%dof%d.pt" % (r, cfg["ranks"]) for r in range(cfg["ranks"])]
        k, n = cfg["stages"], cfg["replicas"]
        files = ["stage%dof%d.pt" % (s, k) for s in range(k)]
        if n == 1:
            return files + ["optimizer-stage%dof%d.pt" % (s, k) for s in range(k)]
        return files + ["optimizer-stage%dof%d-replica%dof%d.pt" % (s, k, r, n) for s in range(k) for r in range(n)]

    def ranks(self, cfg):
        return cfg["ranks"] if cfg["kind"] == "dp" else cfg["stages"] * cfg["replicas"]

    def must(self, argv, what, ns=None):
        """A run the suite needs to succeed (references and bases)."""
        run = self.execute(argv, self.args.prep_bound, ns=ns, tag="prep")
        if run.rc != 0 or run.hung:
            path = os.path.join(self.logdir, "prep-%s.stderr" % re.sub(r"\W+", "-", what))
            with open(path, "w") as f:
                f.write(run.err)
            raise Harness("%s failed (%s; stderr in %s)" % (what, "hang" if run.hung else "exit %s" % run.rc, path))
        return run

    def ref(self, name):
        """The results of an undisturbed run of `name` to its resume length."""
        if name in self.refs:
            return self.refs[name]
        cfg = self.configs()[name]
        out = os.path.join(self.work, "ref-%s.json" % name)
        self.must(cfg["args"] + ["--steps", str(cfg["resume_steps"]), "--json", out], "reference " + name)
        with open(out) as f:
            self.refs[name] = json.load(f)
        return self.refs[name]

    def base(self, name):
        """A whole checkpoint of `name` (for dp, the one every dp fault resumes from)."""
        if name in self.bases:
            return self.bases[name]
        cfg = self.configs()[name]
        d = os.path.join(self.work, "base-" + name)
        if cfg["kind"] in ("dp", "train"):
            self.must(cfg["args"] + ["--steps", str(cfg["base_steps"]), "--save", d], "base " + name)
        else:
            self.must(cfg["args"] + ["--steps", "8", "--save", d], "base " + name)
        for junk in (".actkit-lock",):
            if os.path.exists(os.path.join(d, junk)):
                os.unlink(os.path.join(d, junk))
        self.bases[name] = d
        return d

    def sanity(self, names):
        """A resume of each base checkpoint must give the reference's
        results: else comparing results would find corruption that is not."""
        for name in names:
            cfg = self.configs()[name]
            ref = self.ref(name)
            d = os.path.join(self.work, "sanity-" + name)
            shutil.copytree(self.base(name), d)
            out = os.path.join(self.work, "sanity-%s.json" % name)
            self.must(cfg["args"] + ["--steps", str(cfg["resume_steps"]), "--resume", d, "--json", out],
                      "sanity " + name)
            with open(out) as f:
                got = json.load(f)
            want = self.tail_of(ref, got.get("start_step", -1))
            if not self.same(got, want):
                raise Harness("a resume of %s's checkpoint does not reproduce the undisturbed run (%s vs %s): results "
                              "cannot be compared" % (name, got.get("train_losses"), ref.get("train_losses")))
            shutil.rmtree(d)

    def size_of(self, path):
        total = 0
        for root, _, files in os.walk(path):
            for f in files:
                total += os.path.getsize(os.path.join(root, f))
        return total

    # -- the mount namespace of a full disk -----------------------------------
    def tmpfs(self, mountpoint, size="64m"):
        """A holder process in a private mount namespace with a tmpfs on
        `mountpoint`; returns its pid. Never mounts on the host."""
        os.makedirs(mountpoint, exist_ok=True)
        script = 'mount -t tmpfs -o size=%s actkit-faults "$0" && echo ready && exec sleep 3600' % size
        p = subprocess.Popen(self.pdeath + ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                                            mountpoint],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             start_new_session=True, text=True)
        line = p.stdout.readline()
        if line.strip() != "ready":
            p.kill()
            p.wait()
            raise Harness("cannot mount a tmpfs in a private mount namespace: " + p.stderr.read().strip())
        self.holders.append(p)
        return p

    def drop(self, holder):
        holder.kill()
        holder.wait()
        self.holders.remove(holder)

    @staticmethod
    def inside(holder, path):
        return "/proc/%d/root%s" % (holder.pid, path)

    def fill(self, holder, mountpoint, free):
        """Leaves `free` bytes on the tmpfs."""
        where = self.inside(holder, mountpoint)
        st = os.statvfs(where)
        have = st.f_bavail * st.f_frsize
        filler = have - free
        if filler > 0:
            fd = os.open(os.path.join(where, ".filler"), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.posix_fallocate(fd, 0, filler)
            finally:
                os.close(fd)
        st = os.statvfs(where)
        return st.f_bavail * st.f_frsize

    def unfill(self, holder, mountpoint):
        f = os.path.join(self.inside(holder, mountpoint), ".filler")
        if os.path.exists(f):
            os.unlink(f)

    # -- the faults -----------------------------------------------------------
    def fresh(self):
        self.dirs += 1
        d = os.path.join(self.work, "f%05d" % self.dirs)
        os.makedirs(d)
        return d

    def tally_total(self):
        return sum(self.tally.values())

    def resume_check(self, name, ckpt, d, ns=None, extra=(), must_work=True):
        """Resumes `ckpt` to the reference's length: (outcome, notes, run)."""
        cfg = self.configs()[name]
        out = os.path.join(d, "resumed.json")
        run = self.execute(cfg["args"] + ["--steps", str(cfg["resume_steps"]), "--resume", ckpt, "--json", out]
                           + list(extra), self.args.rank_timeout + 25, ns=ns, tag="resume")
        bad, seen = self.verdict(run)
        if bad:
            return bad, ["resume: " + s for s in seen], run
        if run.rc != 0:
            if must_work:
                return "lost", ["resume failed: " + self.error_line(run)], run
            return "clean", ["resume refused: " + self.error_line(run)], run
        with open(out) as f:
            got = json.load(f)
        start = got.get("start_step", 0)
        diff = self.difference(got, self.tail_of(self.ref(name), start))
        if diff:
            return "silent", ["resumed at step %d with other results than the undisturbed run: %s" % (start, diff)], run
        return "recovered", ["resumed at step %d" % start], run

    def kill_fault(self, spec, rng):
        """kill-rank, kill-launcher and stop-rank faults."""
        name = spec["config"]
        cfg = self.configs()[name]
        d = self.fresh()
        ckpt = os.path.join(d, "ckpt")
        timeout = self.args.rank_timeout
        args = list(cfg["args"])
        if spec["kind"] == "stop-rank":
            timeout = self.args.stop_timeout
            args[args.index("--timeout") + 1] = str(timeout)
        if cfg["kind"] == "dp":
            shutil.copytree(self.base(name), ckpt)
            argv = args + ["--steps", str(cfg["steps"]), "--resume", ckpt, "--save", ckpt]
        else:
            os.makedirs(ckpt)
            argv = args + ["--steps", str(cfg["steps"]), "--save", ckpt, "--save-every", str(cfg["every"])]
        trig = Trigger(spec["when"], spec["who"], spec["sig"], spec["delay"], spec.get("then"))
        # After a kill the launcher must end within the timeout and a margin;
        # a stopped rank is noticed within twice the timeout, and the
        # launcher then gives the others up to 10 s.
        after = (2 * timeout + 20) if spec["kind"] == "stop-rank" else timeout + 15
        run = self.execute(argv, self.args.run_bound, trigger=trig, after=after, watch=ckpt, rng=rng,
                           tag=spec["kind"])
        if spec["kind"] in ("stop-rank", "stop-launcher") and trig.pid:
            send(trig.pid, signal.SIGCONT)
        target = "%s %s" % (name, trig.describe())
        bad, seen = self.verdict(run)
        notes = [trig.note if trig.fired else "before the fault was injected"]
        if bad:
            return bad, target, run, notes + seen
        if not trig.fired or run.rc == 0:
            return None, target, run, []
        outcome = "clean"
        if spec["kind"] == "stop-launcher":
            pass
        elif spec["who"] != "launcher" and spec["kind"] == "stop-rank":
            r = run.ranks.get(trig.pid)
            if r is not None and not re.search(r"rank %d\b" % r, run.err):
                notes.append("NOTE: no error names the stopped rank %d" % r)
                self.notes["stopped rank not named"] += 1
        elif spec["who"] != "launcher":
            r = run.ranks.get(trig.pid)
            if r is not None and not re.search(r"rank %d\b" % r, run.err):
                notes.append("NOTE: the error does not name rank %d" % r)
                self.notes["killed rank not named"] += 1
        elif run.rc != -spec["sig"] and spec["sig"] != signal.SIGKILL:
            notes.append("NOTE: the launcher ended by %s, not by the %s it was sent" % (
                "exit %d" % run.rc if run.rc >= 0 else signame(-run.rc), signame(spec["sig"])))
            self.notes["launcher did not end by its signal"] += 1
        if not re.search(r"error", run.err, re.I) and spec["who"] != "launcher" and spec["kind"] != "stop-launcher":
            notes.append("NOTE: no error message")
            self.notes["failed without an error message"] += 1
        notes.append(self.error_line(run))
        stale = [f for _, _, fs in os.walk(ckpt) for f in fs if ".tmp." in f]
        if stale:
            notes.append("%d temporary file(s) of the killed save left in the folder" % len(stale))
            self.notes["a killed save's temporary files left in the checkpoint folder"] += 1
        expected = self.expected_files(cfg)
        complete = cfg["kind"] == "dp" or run.files.complete(expected) > 0
        if has_checkpoint(ckpt, expected):
            res, more, rrun = self.resume_check(name, ckpt, d, must_work=complete)
            notes += ["checkpoints committed %d" % run.files.complete(expected)] + more
            if res != "clean":
                outcome = res
            if res in ("hang", "crash", "lost", "silent"):
                run.err += "\n--- the resume's stderr ---\n" + rrun.err
        return outcome, target, run, notes

    def disk_fault(self, spec, rng):
        name = spec["config"]
        cfg = self.configs()[name]
        variant = spec["variant"]
        d = self.fresh()
        disk = os.path.join(d, "disk")
        holder = self.tmpfs(disk)
        try:
            inside = lambda p: self.inside(holder, p)
            ckpt = os.path.join(disk, "ckpt")
            resume_extra = []
            watch = None
            json_out = os.path.join(d, "run.json")
            expected = self.expected_files(cfg) if variant != "json" else []
            complete_before = False
            if variant == "pipeline-save":
                os.makedirs(inside(ckpt))
                argv = cfg["args"] + ["--steps", str(cfg["steps"]), "--save", ckpt, "--save-every", str(cfg["every"])]
                unit = self.size_of(self.base(name))
                watch = inside(ckpt)
            elif variant == "buffers":
                # The checkpoint on the host, AQ-SGD's stores on the small disk.
                ckpt = os.path.join(d, "ckpt")
                os.makedirs(ckpt)
                buf = os.path.join(disk, "buffers")
                argv = cfg["args"] + ["--steps", str(cfg["steps"]), "--save", ckpt, "--save-every", str(cfg["every"]),
                                      "--buffer-dir", buf]
                resume_extra = ["--buffer-dir", buf]
                unit = self.size_of(os.path.join(self.base(name), "buffers"))
                watch = ckpt
            elif variant in ("dp-save", "train-save"):
                shutil.copytree(self.base(name), inside(ckpt))
                argv = cfg["args"] + ["--steps", str(cfg["steps"]), "--resume", ckpt, "--save", ckpt]
                unit = self.size_of(self.base(name))
                watch = inside(ckpt)
                complete_before = True
            elif variant == "json":
                json_out = os.path.join(disk, "run.json")
                argv = cfg["args"] + ["--steps", "4"]
                unit = 4096
            else:
                raise Harness("unknown disk variant " + variant)
            argv = argv + ["--json", json_out]
            free = self.fill(holder, disk, int(spec["fraction"] * unit))
            target = "%s %s free=%dKiB (%.2f of %s)" % (name, variant, free // 1024, spec["fraction"],
                                                        "a checkpoint" if variant != "buffers" else "the stores")
            run = self.execute(argv, self.args.rank_timeout + 25, watch=watch, rng=rng, ns=holder.pid, tag="disk")
            bad, seen = self.verdict(run)
            if bad:
                return bad, target, run, seen
            notes = []
            if run.rc == 0:
                outcome = "recovered"
                notes.append("it fitted")
                if variant == "json":
                    return outcome, target, run, notes
            else:
                outcome = "clean"
                line = self.error_line(run)
                notes.append(line)
                if not re.search(r"No space left|ENOSPC", run.err):
                    notes.append("NOTE: the error does not say the disk is full")
                    self.notes["full disk not named as such"] += 1
                if disk not in run.err:
                    notes.append("NOTE: the error names no file on the full disk")
                    self.notes["full disk: no file named"] += 1
            # What was whole before the disk filled must still load.
            self.unfill(holder, disk)
            if variant == "json":
                return outcome, target, run, notes
            complete = complete_before or run.files.complete(expected) > 0
            ck_inside = inside(ckpt) if variant != "buffers" else ckpt
            if has_checkpoint(ck_inside, expected):
                res, more, rrun = self.resume_check(name, ckpt, d, ns=holder.pid, extra=resume_extra,
                                                    must_work=complete)
                notes += ["checkpoints committed %d" % run.files.complete(expected)] + more
                if res != "clean":
                    outcome = res if not (outcome == "recovered" and res == "recovered") else "recovered"
                if res in ("hang", "crash", "lost", "silent"):
                    run.err += "\n--- the resume's stderr ---\n" + rrun.err
            return outcome, target, run, notes
        finally:
            self.drop(holder)

    def corrupt_fault(self, spec, rng):
        name = spec["config"]
        cfg = self.configs()[name]
        loader = spec["loader"]
        d = self.fresh()
        ckpt = os.path.join(d, "ckpt")
        shutil.copytree(self.base(name), ckpt)
        files = read_files(ckpt)
        pick = [f for f in files if re.search(spec["files"], os.path.basename(f))]
        victim = rng.choice(pick or files)
        path = os.path.join(ckpt, victim)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        size = len(data)
        if spec["mode"] == "truncate":
            cut = rng.randrange(0, size)
            data = data[:cut]
            what = "cut to %d of %d bytes" % (cut, size)
        else:
            flips = []
            for _ in range(rng.randint(1, 8)):
                region = rng.choice(["any", "any", "head", "tail"])
                if region == "head":
                    off = rng.randrange(0, min(size, 1024))
                elif region == "tail":
                    off = rng.randrange(max(0, size - 1024), size)
                else:
                    off = rng.randrange(0, size)
                bit = rng.randrange(8)
                data[off] ^= 1 << bit
                flips.append("%d.%d" % (off, bit))
            what = "bits flipped at " + ",".join(flips)
        with open(path, "wb") as f:
            f.write(data)
        out = os.path.join(d, "run.json")
        if loader == "resume":
            argv = cfg["args"] + ["--steps", str(cfg["resume_steps"]), "--resume", ckpt]
            ref = self.ref(name)
        else:  # --init of a pipeline from a checkpoint folder (a pipeline's, or train's whole model)
            argv = self.configs()["pipeline-2"]["args"] + ["--steps", "3", "--init", ckpt]
            ref = self.init_ref(name)
        target = "%s --%s %s: %s" % (name, loader, victim, what)
        run = self.execute(argv + ["--json", out], self.args.rank_timeout + 25, rng=rng, tag="corrupt")
        bad, seen = self.verdict(run)
        if bad:
            return bad, target, run, seen
        if run.rc != 0:
            notes = [self.error_line(run)]
            if os.path.basename(victim) not in run.err:
                notes.append("NOTE: the refusal does not name %s" % os.path.basename(victim))
                self.notes["corrupt file not named"] += 1
            if "unexpected error" in run.err:
                notes.append("NOTE: an unexpected error (not a format error)")
                self.notes["corrupt file: unexpected error"] += 1
            return "clean", target, run, notes
        with open(out) as f:
            got = json.load(f)
        want = ref if loader != "resume" else self.tail_of(ref, self.base_step(name))
        diff = self.difference(got, want)
        if diff:
            return "silent", target, run, ["the run succeeded with other results than from the whole file: " + diff]
        return "recovered", target, run, ["harmless: the same results"]

    def misuse_fault(self, spec, rng):
        """misuse faults: the run's outcome and what it left of the user's files."""
        v = spec["variant"]
        d = self.fresh()
        notes = []
        if v == "spawn-signal":
            argv = (["dp"] + MODEL + ["--workers", "12", "--max-ranks", "12", "--data", "synthetic", "--train-limit",
                                      "48", "--batch", "4", "--steps", "2", "--timeout", str(self.args.rank_timeout)])
            trig = Trigger(("start",), "launcher", spec["sig"], spec["delay"])
            run = self.execute(argv, self.args.run_bound, trigger=trig, after=self.args.rank_timeout + 15, rng=rng,
                               tag="misuse")
            target = "dp --workers 12, %s" % trig.describe()
            bad, seen = self.verdict(run)
            if bad:
                return bad, target, run, [trig.note] + seen
            if not trig.fired or run.rc == 0:
                return None, target, run, []
            if run.rc != -spec["sig"]:
                notes.append("NOTE: the launcher ended by %s, not by the %s it was sent" % (
                    "exit %d" % run.rc if run.rc >= 0 else signame(-run.rc), signame(spec["sig"])))
                self.notes["launcher did not end by its signal"] += 1
            return "clean", target, run, [trig.note] + notes
        if v in ("json-chardev", "json-fifo", "json-link"):
            node = os.path.join(d, "out")
            reader = None
            if v == "json-chardev":
                os.mknod(node, 0o666 | 0o020000, os.makedev(1, 3))  # a private /dev/null
            elif v == "json-fifo":
                os.mkfifo(node)
                got = []

                def read_all():
                    with open(node, "rb") as f:
                        got.append(f.read())
                reader = threading.Thread(target=read_all, daemon=True)
                reader.start()
            else:
                with open(os.path.join(d, "real.json"), "w") as f:
                    f.write("old")
                os.symlink("real.json", node)
            before = os.lstat(node)
            run = self.execute(self.configs()["train"]["args"] + ["--json", node], self.args.run_bound, tag="misuse")
            if reader:
                if run.rc != 0:
                    try:  # a refused write leaves the reader waiting for a writer
                        os.close(os.open(node, os.O_WRONLY | os.O_NONBLOCK))
                    except OSError:
                        pass
                reader.join(5)
            target = "train --json onto a %s" % v[5:]
            bad, seen = self.verdict(run)
            if bad:
                return bad, target, run, seen
            after = os.lstat(node) if os.path.lexists(node) else None
            if after is None or (after.st_mode, after.st_ino) != (before.st_mode, before.st_ino):
                return "lost", target, run, ["the %s was replaced or removed" % v[5:]]
            if run.rc != 0:
                return "clean", target, run, [self.error_line(run)]
            if v == "json-fifo" and not (got and got[0].startswith(b"{")):
                return "silent", target, run, ["the FIFO's reader got no JSON"]
            if v == "json-link":
                with open(os.path.join(d, "real.json")) as f:
                    if not f.read().startswith("{"):
                        return "silent", target, run, ["the link's target does not hold the JSON"]
            return "recovered", target, run, ["written through the %s" % v[5:]]
        if v in ("foreign-pipeline", "foreign-dp"):
            folder = os.path.join(d, "theirs")
            theirs = {"step-1/README.md": "mine", "step-2/main.c": "int main;", "step-99/sub/data.csv": "1,2",
                      "latest": "step-2\n", "model.pt": "not a model"}
            for rel, text in theirs.items():
                os.makedirs(os.path.dirname(os.path.join(folder, rel)), exist_ok=True)
                with open(os.path.join(folder, rel), "w") as f:
                    f.write(text)
            name = "pipeline-2" if v == "foreign-pipeline" else "dp-2"
            argv = self.configs()[name]["args"] + ["--steps", "2", "--save", folder]
            run = self.execute(argv, self.args.run_bound, tag="misuse")
            target = "%s --save into a folder of someone else's files" % name
            bad, seen = self.verdict(run)
            if bad:
                return bad, target, run, seen
            changed = []
            for rel, text in theirs.items():
                try:
                    with open(os.path.join(folder, rel)) as f:
                        if f.read() != text:
                            changed.append(rel)
                except OSError:
                    changed.append(rel)
            if changed:
                return "lost", target, run, ["the user's files changed or went: " + ", ".join(changed)]
            if run.rc == 0:
                return "silent", target, run, ["saved into someone else's folder"]
            return "clean", target, run, [self.error_line(run)]
        if v == "hostile-regex":
            folder = self.hostile_tokenizer_folder(d)
            argv = ["generate", "--init", folder, "--prompt", "a" * 40 + "!", "--max-new-tokens", "1"]
            run = self.execute(argv, self.args.run_bound, tag="misuse")
            target = "generate with a backtracking Split pattern"
            bad, seen = self.verdict(run)
            if bad:
                return bad, target, run, seen
            if run.rc == 0:
                return "silent", target, run, ["the pattern's match ended (no bound?)"]
            line = self.error_line(run)
            if "tokenizer.json" not in line:
                notes.append("NOTE: the error does not name the tokenizer file")
                self.notes["hostile pattern not named"] += 1
            return "clean", target, run, notes + [line]
        raise Harness("unknown misuse variant " + v)

    @staticmethod
    def hostile_tokenizer_folder(d):
        """A tiny GPT-2 folder whose tokenizer.json's Split pattern backtracks
        without bound: (a+)+$ on a run of a's and one other character."""
        folder = os.path.join(d, "hostile")
        os.makedirs(folder)
        fixture = os.path.join(REPO, "tests", "oracle", "fixtures", "tokenizers", "gpt2", "tokenizer.json")
        with open(fixture) as f:
            tok = json.load(f)
        vocab = len(tok["model"]["vocab"]) + len(tok.get("added_tokens", []))
        tok["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": "(a+)+$"}, "behavior": "Isolated", "invert": False},
            tok["pre_tokenizer"]]}
        with open(os.path.join(folder, "tokenizer.json"), "w") as f:
            json.dump(tok, f)
        e, p = 8, 16
        config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
                  "vocab_size": vocab, "n_positions": p, "n_embd": e, "n_layer": 1, "n_head": 2, "n_inner": None,
                  "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)
        h = "transformer.h.0."
        shapes = {"transformer.wte.weight": [vocab, e], "transformer.wpe.weight": [p, e],
                  h + "ln_1.weight": [e], h + "ln_1.bias": [e], h + "attn.c_attn.weight": [e, 3 * e],
                  h + "attn.c_attn.bias": [3 * e], h + "attn.c_proj.weight": [e, e], h + "attn.c_proj.bias": [e],
                  h + "ln_2.weight": [e], h + "ln_2.bias": [e], h + "mlp.c_fc.weight": [e, 4 * e],
                  h + "mlp.c_fc.bias": [4 * e], h + "mlp.c_proj.weight": [4 * e, e], h + "mlp.c_proj.bias": [e],
                  "transformer.ln_f.weight": [e], "transformer.ln_f.bias": [e]}
        header, blobs, offset = {}, [], 0
        rng = random.Random(5)
        for name, shape in shapes.items():
            n = 1
            for x in shape:
                n *= x
            data = struct.pack("<%df" % n, *[rng.gauss(0, 0.02) for _ in range(n)])
            header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
            blobs.append(data)
            offset += len(data)
        head = json.dumps(header).encode()
        head += b" " * (-len(head) % 8)
        with open(os.path.join(folder, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))
        return folder

    def base_step(self, name):
        cfg = self.configs()[name]
        return cfg["base_steps"] if cfg["kind"] in ("dp", "train") else 8

    def init_ref(self, name):
        key = "init-" + name
        if key not in self.refs:
            cfg = self.configs()[name]
            src = self.base(name)
            out = os.path.join(self.work, "ref-%s.json" % key)
            self.must(self.configs()["pipeline-2"]["args"] + ["--steps", "3", "--init", src, "--json", out],
                      "reference " + key)
            with open(out) as f:
                self.refs[key] = json.load(f)
        return self.refs[key]

    # -- the plan -----------------------------------------------------------
    def plan(self):
        r = self.rng
        short = self.args.short
        pipes = ["pipeline-2", "pipeline-3", "aqsgd-2", "aqsgd-3", "pipeline-dp"]
        dps = ["dp-2", "dp-3"]
        if short:
            pipes, dps = ["pipeline-2", "aqsgd-2"], ["dp-2"]
        specs = []

        def sig():
            return r.choices([signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV, signal.SIGABRT], [6, 2, 1, 1])[0]

        def kill_rank(name, when=None):
            cfg = self.configs()[name]
            n = self.ranks(cfg)
            saves = 1 if cfg["kind"] == "dp" else (cfg["steps"] - 1) // cfg["every"] + 1
            first = cfg.get("base_steps", 0) + 1
            when = when or r.choices(["start", "step", "save", "commit", "last"], [1, 4, 2, 2, 1])[0]
            who = r.randrange(n)
            delay = 0.0
            if when == "start":
                w, delay = ("start",), r.uniform(0, 0.3)
            elif when == "step":
                w, delay = ("step", r.randint(first, cfg["steps"] - 1)), r.uniform(0, 0.15)
            elif when == "last":
                w, delay = ("step", cfg["steps"]), r.uniform(0, 0.05)
            elif when == "save":
                w, delay = ("save", r.randint(1, saves)), r.choice([0, 0, r.uniform(0, 0.02)])
                who = r.choice(["writer", "writer", who])
                x = r.random()
                if cfg["kind"] == "dp" and x < 0.4:
                    w, who = ("save", 1, "model.pt"), "writer"  # rank 0, its optimizer file committed
                elif x > 0.75:
                    w, who = w + ("latest",), "writer"  # rank 0 writing the commit (DIR/latest)
            else:
                w, delay = ("commit", r.randint(min(2, saves), saves)), 0.0
                who = r.choice(["pending", "pending", "committer"])
                x = r.random()
                if cfg["kind"] == "dp" and x < 0.4:
                    # rank 0 between its optimizer file and model.pt
                    w, who = ("commit", 1, "optimizer-rank0of%d.pt" % n), "committer"
                elif x > 0.75:
                    # just after the commit (DIR/latest), the older step folders going
                    w, who = w + ("latest",), r.choice(["committer", r.randrange(n)])
            return dict(kind="kill-rank", config=name, when=w, who=who, sig=sig(), delay=delay)

        def kill_launcher(name):
            cfg = self.configs()[name]
            when = r.choice(["start", "step", "step"])
            first = cfg.get("base_steps", 0) + 1
            w = ("start",) if when == "start" else ("step", r.randint(first, cfg["steps"] - 1))
            return dict(kind="kill-launcher", config=name, when=w, who="launcher",
                        sig=r.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGINT]),
                        delay=r.uniform(0, 0.5 if when == "start" else 0.15))

        def stop_rank(name, launcher=False):
            cfg = self.configs()[name]
            first = cfg.get("base_steps", 0) + 1
            spec = dict(kind="stop-rank", config=name, when=("step", r.randint(first, cfg["steps"] - 2)),
                        who=r.randrange(self.ranks(cfg)), sig=signal.SIGSTOP, delay=r.uniform(0, 0.1))
            if launcher:  # a stopped rank, then its launcher killed: the rank must still end
                spec.update(kind="stop-launcher", then=signal.SIGKILL)
            return spec

        # Free space as a fraction of a checkpoint (buffers: of the stores);
        # the short run's fraction, then the full run's range. A pipeline
        # save needs about twice a checkpoint once one is on the disk.
        disk_variants = [("pipeline-save", "pipeline-2", 1.5, (0.05, 2.4)),
                         ("pipeline-save", "aqsgd-2", 1.25, (0.05, 1.8)),
                         ("buffers", "aqsgd-2", 0.5, (0.02, 1.0)), ("dp-save", "dp-2", 0.5, (0.0, 0.9)),
                         ("train-save", "train", 0.5, (0.0, 0.95)), ("json", "pipeline-2", 0.0, (0.0, 0.3))]

        def disk(i=None):
            v, name, fixed, (lo, hi) = disk_variants[i] if i is not None else r.choice(disk_variants)
            return dict(kind="full-disk", variant=v, config=name, fraction=fixed if short else r.uniform(lo, hi))

        corrupt_targets = [
            ("pipeline-2", "resume", r"^stage"), ("pipeline-2", "resume", r"^optimizer"),
            ("pipeline-2", "init", r"^stage"), ("aqsgd-2", "resume", r"\.store$"), ("aqsgd-2", "resume", r"\.pt$"),
            ("dp-2", "resume", r"^model\.pt$"), ("dp-2", "resume", r"^optimizer"), ("train", "resume", r"\.pt$"),
            ("train", "init", r"^model\.pt$"), ("pipeline-2", "resume", r"^latest$"), ("dp-2", "resume", r"^latest$")]

        misuse_variants = ["spawn-signal", "json-chardev", "json-fifo", "json-link", "foreign-pipeline", "foreign-dp",
                           "hostile-regex"]

        def misuse(i=None):
            v = misuse_variants[i] if i is not None else r.choice(misuse_variants)
            return dict(kind="misuse", variant=v, config="train" if v.startswith("json") else (
                "pipeline-2" if v == "foreign-pipeline" else "dp-2" if v in ("foreign-dp", "spawn-signal") else "none"),
                sig=r.choice([signal.SIGTERM, signal.SIGINT]), delay=r.uniform(0, 0.12))

        def corrupt(i=None):
            name, loader, files = corrupt_targets[i] if i is not None else r.choice(corrupt_targets)
            return dict(kind="corrupt", config=name, loader=loader, files=files,
                        mode=r.choices(["flip", "truncate"], [3, 1])[0])

        if short:
            for name, when in [("pipeline-2", "step"), ("pipeline-2", "commit"), ("pipeline-2", "save"),
                               ("aqsgd-2", "step"), ("aqsgd-2", "save"), ("aqsgd-2", "commit"), ("dp-2", "step"), ("dp-2", "save"), ("dp-2", "commit"),
                               ("pipeline-2", "start")]:
                specs.append(kill_rank(name, when))
            specs += [kill_launcher("pipeline-2"), kill_launcher("dp-2"), stop_rank("pipeline-2")]
            specs += [disk(i) for i in range(len(disk_variants))]
            specs += [corrupt(i) for i in range(len(corrupt_targets))]
            specs += [misuse(i) for i in range(len(misuse_variants))]
        else:
            target = max(self.args.faults, 1)
            n_kill = int(target * 0.36)
            n_launch = int(target * 0.07)
            n_stop = max(2, int(target * 0.03))
            n_disk = int(target * 0.15)
            n_misuse = max(len(misuse_variants), int(target * 0.07))
            n_corrupt = target - n_kill - n_launch - n_stop - n_disk - n_misuse
            names = pipes + dps
            for i in range(n_kill):
                specs.append(kill_rank(names[i % len(names)]))
            for i in range(n_launch):
                specs.append(kill_launcher(names[i % len(names)]))
            for i in range(n_stop):
                specs.append(stop_rank(names[i % len(names)]))
            for i in range(2):
                specs.append(stop_rank(names[i % len(names)], launcher=True))
                n_corrupt -= 1
            specs += [disk(i % len(disk_variants)) for i in range(n_disk)]
            specs += [corrupt(i % len(corrupt_targets)) for i in range(n_corrupt)]
            specs += [misuse(i % len(misuse_variants)) for i in range(n_misuse)]
            r.shuffle(specs)
        if not self.can_mount:
            skipped = [s for s in specs if s["kind"] == "full-disk"]
            if skipped:
                print("faults: %d full-disk faults skipped: they need root, unshare and nsenter" % len(skipped))
            specs = [s for s in specs if s["kind"] != "full-disk"]
        if os.geteuid() != 0:
            specs = [s for s in specs if s.get("variant") != "json-chardev"]  # mknod needs root
        return specs

    def replan(self, spec):
        """Another point for a fault that missed (the run ended first)."""
        spec = dict(spec)
        if "when" not in spec:  # misuse: the signal sooner
            spec["delay"] = spec.get("delay", 0) / 2
            return spec
        cfg = self.configs()[spec["config"]]
        first = cfg.get("base_steps", 0) + 1
        if spec["when"][0] == "step":
            spec["when"] = ("step", self.rng.randint(first, max(first, spec["when"][1] - 2)))
        elif spec["when"][0] in ("save", "commit"):
            # A folder without commits has no DIR/latest to wait for.
            spec["when"] = (spec["when"][0], max(1, spec["when"][1] - 1)) + tuple(
                x for x in spec["when"][2:] if x != "latest")
        return spec

    # -- the whole ------------------------------------------------------------
    def record(self, i, spec, outcome, target, run, notes, seconds):
        self.tally[outcome] += 1
        line = "%04d %-13s %-10s %6.1fs  %s" % (i, spec["kind"], outcome, seconds, target)
        detail = "; ".join(n for n in notes if n)
        self.log.write(line + ("  |  " + detail if detail else "") + "\n")
        self.log.flush()
        # Every outcome that is not clean or recovered keeps its stderr, and so
        # does one with a remark on its error message (NOTE:).
        if outcome in ("hang", "crash", "lost", "silent") or any(n.startswith("NOTE:") for n in notes):
            path = os.path.join(self.logdir, "%04d-%s-%s.stderr" % (i, spec["kind"], outcome))
            with open(path, "w") as f:
                f.write("# %s\n# %s\n# %s\n" % (line, detail, " ".join(map(str, spec.items()))))
                f.write(run.err)
                f.write("\n--- stdout (tail) ---\n" + run.out[-3000:])
        if outcome in ("hang", "crash", "lost", "silent") or self.args.verbose:
            print(line + ("  |  " + detail[:400] if detail else ""), flush=True)

    def main(self):
        print("faults: seed %d; binary %s%s; log %s" % (
            self.seed, self.args.binary, " (a copy)" if self.libdir else "", self.log_path), flush=True)
        if not self.watch.available:
            print("faults: no process events (not root?): a crash of a rank other than the first to fail is seen "
                  "only in the output")
        specs = self.plan()
        used = {s["config"] for s in specs if s["config"] in self.configs()}
        t0 = time.monotonic()
        # Bases, references, and a check that a resume reproduces them.
        self.sanity(sorted(used))
        print("faults: %d faults planned; references ready in %.0fs" % (len(specs), time.monotonic() - t0), flush=True)
        for i, spec in enumerate(specs, 1):
            rng = random.Random("%d-%d" % (self.seed, i))
            start = time.monotonic()
            for attempt in range(4):
                if spec["kind"] == "full-disk":
                    outcome, target, run, notes = self.disk_fault(spec, rng)
                elif spec["kind"] == "corrupt":
                    outcome, target, run, notes = self.corrupt_fault(spec, rng)
                elif spec["kind"] == "misuse":
                    outcome, target, run, notes = self.misuse_fault(spec, rng)
                else:
                    outcome, target, run, notes = self.kill_fault(spec, rng)
                if outcome is not None:
                    break
                self.missed += 1
                self.log.write("     %-13s missed      (the run ended before %s)\n" % (spec["kind"], target))
                spec = self.replan(spec)
            if outcome is None:
                continue
            # The launcher's private TMPDIR (and AQ-SGD's temporary stores)
            # must go however the group ends.
            tmp = self.env["TMPDIR"]
            left = sorted(os.listdir(tmp))
            if left:
                notes.append("left in TMPDIR: " + ", ".join(left[:3]))
                self.notes["files left in TMPDIR after the run"] += 1
                for f in left:
                    path = os.path.join(tmp, f)
                    shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.unlink(path)
            self.record(i, spec, outcome, target, run, notes, time.monotonic() - start)
            for f in os.listdir(self.work):
                if re.match(r"f\d{5}$", f):
                    shutil.rmtree(os.path.join(self.work, f), ignore_errors=True)
            if not self.args.verbose and i % 10 == 0:
                print("faults: %d/%d done (%.0fs)" % (i, len(specs), time.monotonic() - t0), flush=True)
        wall = time.monotonic() - t0
        for note, n in sorted(self.notes.items()):
            print("faults: note: %d × %s" % (n, note))
        if self.missed:
            print("faults: %d injections missed their run (it ended first) and were retried" % self.missed)
        if self.watch.overflowed:
            print("faults: note: process events were dropped at some point; a crash may have gone unseen")
        self.log.write("# seed %d, %.0f s\n" % (self.seed, wall))
        self.log.close()
        print("faults: seed %d, %.0f s, log %s" % (self.seed, wall, self.log_path))
        return self.summary()

    def summary(self):
        t = self.tally
        n = self.tally_total()
        line = ("faults: %d injected, %d clean failures, %d recovered, %d hangs, %d crashes, %d lost checkpoints, "
                "%d silent corruptions" % (n, t["clean"], t["recovered"], t["hang"], t["crash"], t["lost"],
                                           t["silent"]))
        return line, 0 if not (t["hang"] or t["crash"] or t["lost"] or t["silent"]) else 1

    def cleanup(self):
        if self.current is not None and self.current.poll() is None:
            try:
                os.killpg(self.current.pid, signal.SIGCONT)
                os.killpg(self.current.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for h in list(self.holders):
            self.drop(h)
        if not self.args.keep:
            shutil.rmtree(self.work, ignore_errors=True)


class Harness(Exception):
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--short", action="store_true", help="a CI-sized sample of every fault kind")
    ap.add_argument("--seed", type=int, default=20240611, help="seed of the plan (default 20240611)")
    ap.add_argument("--binary", default=os.path.join(REPO, "build", "bin", "actkit"), help="the actkit CLI")
    ap.add_argument("--faults", type=int, default=210, help="faults in the full run (default 210)")
    ap.add_argument("--log-dir", help="where the log and the kept stderr go (default: a new folder in $TMPDIR)")
    ap.add_argument("--rank-timeout", type=int, default=20, help="--timeout of the runs (default 20)")
    ap.add_argument("--stop-timeout", type=int, default=6, help="--timeout of the stopped-rank runs (default 6)")
    ap.add_argument("--orphan-s", type=float, default=5.0, help="how long a rank may outlive its launcher")
    ap.add_argument("--prep-bound", type=int, default=180, help="bound of the suite's own reference runs")
    ap.add_argument("--run-bound", type=int, default=90, help="bound of a run before its fault is injected")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every fault's line")
    args = ap.parse_args()
    suite = None
    code = 2
    line = "faults: 0 injected, 0 clean failures, 0 recovered, 0 hangs, 0 crashes, 0 lost checkpoints, 0 silent corruptions"

    def stop(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    # Started in the background (nohup, `&` in a script) this process may
    # have inherited SIGINT and SIGQUIT ignored, and its children would too:
    # then a SIGINT to a launcher that has not yet installed its handlers
    # does nothing. The runs get the default dispositions.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    try:
        suite = Suite(args)
        line, code = suite.main()
    except Harness as e:
        print("faults: the suite could not run: %s" % e, flush=True)
        if suite:
            line = suite.summary()[0]
        code = 2
    except KeyboardInterrupt:
        print("faults: interrupted", flush=True)
        if suite:
            line = suite.summary()[0]
        code = 2
    except Exception:  # a bug of the suite's own: still the summary, still the cleanup
        import traceback
        traceback.print_exc()
        print("faults: the suite itself failed (above)", flush=True)
        if suite:
            line = suite.summary()[0]
        code = 2
    finally:
        if suite:
            suite.cleanup()
    print(line, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
