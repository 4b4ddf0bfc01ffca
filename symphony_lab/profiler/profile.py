"""A LIP profile: where each thread's wall time went, per source line.

Buckets, in seconds of wall time:
- `queue`: inside a `pred`, waiting for a batch (the pred's time less its forward share);
- `forward`: its share of the forward passes it was in (a batch's time divided among its
  members by the tokens each fed);
- `own`: the program's own Python between syscalls (the thread's CPU time);
- `blocking`: between syscalls but off the CPU (sleeps, sockets, tools), plus the syscalls that
  wait on other programs (`recv`, `join`);
- `kernel`: the engine working for the thread outside batches (tokenize, kv_fork, ...).
They add up to the thread's wall time (`ThreadProfile.accounted`).
"""

from __future__ import annotations

import html
import os
import sysconfig
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from .names import source_name

Frame = tuple[str, int, str]  # file, line, function
Stack = tuple[Frame, ...]  # outermost first

BUCKETS = ("queue", "forward", "own", "blocking", "kernel")
WAITING_CALLS = ("recv", "join")
PROFILE_PID_OFFSET = 1_000_000  # trace processes of the profile tracks
_STDLIB = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")})


def program_frame(stack: Stack) -> Frame | None:
    """The innermost frame of the program's own code (not the standard library or a package)."""
    for fr in reversed(stack):
        if not fr[0].startswith(_STDLIB) and "site-packages" not in fr[0]:
            return fr
    return stack[-1] if stack else None


@dataclass
class Times:
    queue: float = 0.0
    forward: float = 0.0
    own: float = 0.0
    blocking: float = 0.0
    kernel: float = 0.0
    preds: int = 0
    tokens: int = 0
    syscalls: int = 0

    @property
    def total(self) -> float:
        return self.queue + self.forward + self.own + self.blocking + self.kernel

    def add(self, bucket: str, seconds: float) -> None:
        setattr(self, bucket, getattr(self, bucket) + seconds)

    def merge(self, other: Times) -> None:
        for f in BUCKETS + ("preds", "tokens", "syscalls"):
            setattr(self, f, getattr(self, f) + getattr(other, f))

    def to_dict(self) -> dict:
        d = {f: getattr(self, f) for f in BUCKETS + ("preds", "tokens", "syscalls")}
        d["total"] = self.total
        return d


@dataclass
class LineRow:
    pid: int
    tid: int
    file: str
    line: int
    function: str
    times: Times = field(default_factory=Times)  # the line itself (innermost program frame)
    inclusive: float = 0.0  # seconds with the line anywhere on the stack (a call line carries its callee)

    @property
    def name(self) -> str:
        """The file as shown: a notebook cell's `In[3]`, else the base name."""
        return source_name(self.file)

    def to_dict(self) -> dict:
        return {
            "pid": self.pid,
            "tid": self.tid,
            "file": self.file,
            "name": self.name,
            "line": self.line,
            "function": self.function,
            "inclusive": self.inclusive,
            **self.times.to_dict(),
        }


@dataclass
class ThreadProfile:
    pid: int
    tid: int
    name: str
    t_start: float
    t_end: float
    times: Times
    dropped: int = 0  # records that fell off the bounded log

    @property
    def wall(self) -> float:
        return self.t_end - self.t_start

    def to_dict(self) -> dict:
        return {
            "pid": self.pid,
            "tid": self.tid,
            "name": self.name,
            "t_start": self.t_start,
            "t_end": self.t_end,
            "wall": self.wall,
            "dropped": self.dropped,
            **self.times.to_dict(),
        }


@dataclass
class Slice:
    """One stretch of a thread for the trace: a syscall or a stretch between syscalls."""

    pid: int
    tid: int
    name: str
    t0: float
    t1: float
    args: dict


@dataclass
class Profile:
    threads: list[ThreadProfile]
    lines: list[LineRow]
    stacks: dict[Stack, Times]  # per call stack (the flame graph's leaves)
    pages: list[tuple[float, int, int]]  # (t, pages used, pages total) after each batch
    slices: list[Slice]
    batches: list[tuple[float, float, int, int]] = field(default_factory=list)  # (t_start, t_end, tokens, size)

    def line(self, file: str, line: int, tid: int | None = None) -> LineRow:
        """One line's row summed over threads (or for one thread); the file may be a basename or a cell's `In[3]`."""
        out = LineRow(-1, -1 if tid is None else tid, file, line, "")
        for r in self.lines:
            if r.line == line and file in (r.file, os.path.basename(r.file), r.name) and tid in (None, r.tid):
                out.times.merge(r.times)
                out.inclusive += r.inclusive
                out.function, out.file = r.function, r.file
        return out

    def thread(self, tid: int, pid: int | None = None) -> ThreadProfile:
        for t in self.threads:
            if t.tid == tid and pid in (None, t.pid):
                return t
        raise KeyError(f"no thread {tid} in this profile (threads: {[t.tid for t in self.threads]})")

    def to_dict(self) -> dict:
        return {
            "threads": [t.to_dict() for t in self.threads],
            "lines": [r.to_dict() for r in self.lines],
            "pages": [list(p) for p in self.pages],
        }

    def table(self, top: int = 30) -> str:
        """The line table as text: the lines that took the most time first."""
        hdr = f"{'line':<34}{'thr':>4}{'total ms':>10}{'queue':>8}{'fwd':>8}{'own':>8}{'block':>8}{'kern':>8}{'preds':>7}{'tok':>6}"
        out = [hdr, "-" * len(hdr)]
        for r in sorted(self.lines, key=lambda r: -r.times.total)[:top]:
            t = r.times
            where = f"{r.name}:{r.line} {r.function}"[:33]
            out.append(
                f"{where:<34}{r.tid:>4}{t.total * 1e3:>10.1f}{t.queue * 1e3:>8.1f}{t.forward * 1e3:>8.1f}"
                f"{t.own * 1e3:>8.1f}{t.blocking * 1e3:>8.1f}{t.kernel * 1e3:>8.1f}{t.preds:>7}{t.tokens:>6}"
            )
        out.append("")
        for th in self.threads:
            t = th.times
            out.append(
                f"thread {th.pid}.{th.tid} {th.name}: wall {th.wall * 1e3:.1f} ms = queue {t.queue * 1e3:.1f}"
                f" + forward {t.forward * 1e3:.1f} + own {t.own * 1e3:.1f} + blocking {t.blocking * 1e3:.1f}"
                f" + kernel {t.kernel * 1e3:.1f}"
            )
        return "\n".join(out)

    def _repr_html_(self, top: int = 30) -> str:
        """The notebook's profile view: the line table with each row's buckets as a stacked bar."""
        colours = {"queue": "#f2b134", "forward": "#4a90d9", "own": "#5cb85c", "blocking": "#d9534f", "kernel": "#999"}
        rows = sorted(self.lines, key=lambda r: -r.times.total)[:top]
        most = max((r.times.total for r in rows), default=0.0) or 1.0
        out = [
            "<table class='symphony-profile'><tr><th>line</th><th>thread</th><th>ms</th><th>preds</th>"
            "<th>tokens</th><th>"
            + " ".join(f"<span style='color:{c}'>■ {b}</span>" for b, c in colours.items())
            + "</th></tr>"
        ]
        for r in rows:
            t = r.times
            bar = "".join(
                f"<span title='{b} {getattr(t, b) * 1e3:.1f} ms' style='display:inline-block;height:10px;"
                f"background:{c};width:{300 * getattr(t, b) / most:.1f}px'></span>"
                for b, c in colours.items()
            )
            out.append(
                f"<tr><td><code>{html.escape(r.name)}:{r.line}</code> "
                f"{html.escape(r.function)}</td><td>{r.pid}.{r.tid}</td><td>{t.total * 1e3:.1f}</td>"
                f"<td>{t.preds}</td><td>{t.tokens}</td><td>{bar}</td></tr>"
            )
        out.append("</table>")
        return "".join(out)

    def flame(self, width: int = 60, min_share: float = 0.01) -> str:
        """A text flame graph: the call tree of the program's frames, each with its share of time."""
        tree: dict = {}
        for stack, t in self.stacks.items():
            node = tree
            for fr in stack or (("(thread)", 0, "?"),):
                node = node.setdefault(fr, [0.0, {}])
                node[0] += t.total
                node = node[1]
        total = sum(v[0] for v in tree.values()) or 1.0
        lines: list[str] = []

        def walk(node: dict, depth: int) -> None:
            for fr, (sec, kids) in sorted(node.items(), key=lambda kv: -kv[1][0]):
                if sec / total < min_share:
                    continue
                bar = "█" * max(1, round(width * sec / total))
                lines.append(f"{'  ' * depth}{source_name(fr[0])}:{fr[1]} {fr[2]}  {sec * 1e3:.1f} ms {bar}")
                walk(kids, depth + 1)

        walk(tree, 0)
        return "\n".join(lines)

    def trace_events(self, pid_offset: int = PROFILE_PID_OFFSET) -> list[dict]:
        """Chrome/Perfetto trace events, on tracks of their own (trace process `pid_offset + pid`,
        named "profile: ..."), so they sit beside a debugger trace without crossing its slices:
        one `X` slice per syscall or stretch between syscalls (named by what it was and its line,
        its buckets in `args`) and counters of KV pages held and of each thread's tokens fed."""
        ev: list[dict] = []
        for th in self.threads:
            tp = pid_offset + th.pid
            ev.append(
                {"name": "process_name", "ph": "M", "pid": tp, "tid": 0, "args": {"name": f"profile: pid {th.pid}"}}
            )
            ev.append(
                {
                    "name": "thread_name",
                    "ph": "M",
                    "pid": tp,
                    "tid": th.tid,
                    "args": {"name": f"profile {th.pid}.{th.tid} {th.name}"},
                }
            )
        for s in self.slices:
            ts, end = round(s.t0 * 1e6, 3), round(s.t1 * 1e6, 3)
            # a slice ends where the next begins: 1 ns short, so rounding never makes them overlap
            ev.append(
                {
                    "name": s.name,
                    "cat": "profile",
                    "ph": "X",
                    "ts": ts,
                    "dur": max(0.0, round(end - ts - 0.001, 3)),
                    "pid": pid_offset + s.pid,
                    "tid": s.tid,
                    "args": s.args,
                }
            )
        fed: dict[tuple[int, int], int] = defaultdict(int)
        for s in self.slices:
            if s.args.get("tokens"):
                fed[(s.pid, s.tid)] += s.args["tokens"]
                ev.append(
                    {
                        "name": f"tokens fed {s.pid}.{s.tid}",
                        "cat": "profile",
                        "ph": "C",
                        "ts": round(s.t1 * 1e6, 3),
                        "pid": pid_offset + s.pid,
                        "tid": 0,
                        "args": {"tokens": fed[(s.pid, s.tid)]},
                    }
                )
        if self.pages:
            ev.append(
                {"name": "process_name", "ph": "M", "pid": pid_offset, "tid": 0, "args": {"name": "profile: KV pages"}}
            )
        for t, used, total in self.pages:
            ev.append(
                {
                    "name": "kv pages held",
                    "cat": "profile",
                    "ph": "C",
                    "ts": round(t * 1e6, 3),
                    "pid": pid_offset,
                    "tid": 0,
                    "args": {"used": used, "free": total - used},
                }
            )
        return ev

    def add_to_trace(self, trace: dict) -> dict:
        """Append this profile's slices and counters to a Chrome trace dict (`Debugger.trace()`)."""
        trace.setdefault("traceEvents", []).extend(self.trace_events())
        return trace


def _where(stack: Stack) -> str:
    fr = program_frame(stack)
    return f"{source_name(fr[0])}:{fr[1]}" if fr else "(thread)"


def build_profile(col: Any, end_ts: float) -> Profile:
    """Fold a collector's logs (`ProfileCollector`, read under its lock) into a Profile."""
    rows: dict[tuple, LineRow] = {}
    stacks: dict[Stack, Times] = defaultdict(Times)
    slices: list[Slice] = []
    threads: list[ThreadProfile] = []

    def charge(t, stack: Stack, bucket: str, sec: float) -> Times:
        fr = program_frame(stack) or ("(thread)", 0, "?")
        key = (t.pid, t.tid, fr[0], fr[1])
        row = rows.get(key)
        if row is None:
            row = rows[key] = LineRow(t.pid, t.tid, fr[0], fr[1], fr[2])
        row.times.add(bucket, sec)
        on_stack = {(f[0], f[1]): f for f in stack}
        on_stack.setdefault((fr[0], fr[1]), fr)
        for (file, line), f in on_stack.items():  # inclusive: every line on the stack carries it once
            r = rows.get((t.pid, t.tid, file, line))
            if r is None:
                r = rows[(t.pid, t.tid, file, line)] = LineRow(t.pid, t.tid, file, line, f[2])
            r.inclusive += sec
        stacks[stack].add(bucket, sec)
        return row.times

    for t in list(col.threads.values()):
        if col.pids is not None and t.pid not in col.pids:
            continue
        tt = Times()
        t_end = t.t_end if t.t_end is not None else end_ts
        for sp in t.syscalls:
            t1 = sp.t1 if sp.t1 is not None else t_end
            dur = max(0.0, t1 - sp.t0)
            if sp.call == "pred" or sp.batches:
                fwd = min(sp.forward, dur)
                parts = {"forward": fwd, "queue": dur - fwd}
            elif sp.call in WAITING_CALLS:
                parts = {"blocking": dur}
            else:
                parts = {"kernel": dur}
            for bucket, sec in parts.items():
                row_times = charge(t, sp.stack, bucket, sec)
                tt.add(bucket, sec)
            row_times.syscalls += 1
            row_times.tokens += sp.tokens
            tt.syscalls += 1
            tt.tokens += sp.tokens
            if sp.call == "pred":
                row_times.preds += 1
                tt.preds += 1
                stacks[sp.stack].preds += 1
            stacks[sp.stack].tokens += sp.tokens
            slices.append(
                Slice(
                    t.pid,
                    t.tid,
                    f"{sp.call} @ {_where(sp.stack)}",
                    sp.t0,
                    t1,
                    {k: round(v * 1e3, 3) for k, v in parts.items()} | {"tokens": sp.tokens},
                )
            )
        for g in t.gaps:
            wall = max(0.0, g.t1 - g.t0)
            own = min(g.own, wall)
            n = sum(g.samples.values())
            shares = [(s, c / n) for s, c in g.samples.items()] if n else [(g.end_stack, 1.0)]
            for stack, w in shares:
                charge(t, stack, "own", own * w)
                charge(t, stack, "blocking", (wall - own) * w)
            tt.own += own
            tt.blocking += wall - own
            if wall > 0:
                main = max(shares, key=lambda sw: sw[1])[0]
                slices.append(
                    Slice(
                        t.pid,
                        t.tid,
                        f"python @ {_where(main)}",
                        g.t0,
                        g.t1,
                        {"own_ms": round(own * 1e3, 3), "blocking_ms": round((wall - own) * 1e3, 3)},
                    )
                )
        threads.append(ThreadProfile(t.pid, t.tid, t.name, t.t_start, t_end, tt, t.dropped))
    threads.sort(key=lambda th: (th.pid, th.tid))
    lines = sorted(rows.values(), key=lambda r: (r.pid, r.tid, r.file, r.line))
    keys = {(th.pid, th.tid) for th in threads}
    batches = [b for b in col.batches if b[4] & keys] if col.pids is not None else list(col.batches)
    return Profile(
        threads, lines, dict(stacks), list(col.pages), sorted(slices, key=lambda s: s.t0), [b[:4] for b in batches]
    )
