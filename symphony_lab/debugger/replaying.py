"""Record and replay: a process's syscall results kept as a `Recording`, and a new process that
is handed them back (so a sampled run comes out the same) and may stop at any earlier `pred` —
which is what a step back is.

`Replayer` is the debugger's part that holds the recordings and the replays. It is composed
through an explicit interface: given the launcher, the breakpoints (a replay's stop is a
temporary breakpoint), the stop table (a step back starts from a stop) and how to find a
process. The kernel hook (kernel_hook.py) asks it, at each stop point, to check a replayed call
(`check`), to hand back a recorded result (`substitute`) and to record one (`keep`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from symphony_core.model.dist import Dist

from .breakpoints import BreakpointTable
from .errors import DebuggerError
from .launching import Launcher
from .record import SUBSTITUTED, Entry, Recording, entry_from, same_inputs, stable_args
from .stop_table import StopTable


@dataclass
class ReplayState:
    rec: Recording
    verify: bool = True
    live_threads: set = field(default_factory=set)
    diverged: list = field(default_factory=list)
    substituted: int = 0
    max_logit_diff: float = 0.0
    done: bool = False

    def check(self, tid: int, seq: int, call: str, args: dict, tokens: Callable[[], list[int] | None]) -> dict | None:
        """Before call `seq` of thread `tid`: None while it asks what the recording did (or the
        thread runs live); else the divergence, and the thread goes on live from here."""
        if tid in self.live_threads:
            return None
        e = self.rec.get(tid, seq)
        if e is None:
            self.live_threads.add(tid)  # the recording ends here: this thread goes on live
            return None
        diff = same_inputs(e, call, args, tokens() if call == "pred" else None)
        if diff is None:
            return None
        self.live_threads.add(tid)
        self.diverged.append({"tid": tid, "seq": seq, "call": call, "why": diff})
        return {"tid": tid, "seq": seq, "call": call, "why": diff}

    def outcome(self, tid: int, seq: int, call: str, error: BaseException | None) -> dict | None:
        """After call `seq` of thread `tid` returned (`error` None) or raised: the divergence when
        the recorded call did the other (a named file there now that was not, say); the thread
        goes on live from here. Its inputs matched, so the thread is not stopped: the
        `replay_diverged` event and `replay_status` say it."""
        e = self.rec.get(tid, seq)
        if tid in self.live_threads or e is None or e.call != call or (e.kind == "error") == (error is not None):
            return None
        if error is None:
            why = f"{call} succeeded where the recorded call raised {e.value}"
        else:
            why = f"{call} raised {type(error).__name__}: {error} where the recorded call succeeded"
        self.live_threads.add(tid)
        d = {"tid": tid, "seq": seq, "call": call, "why": why}
        self.diverged.append(d)
        return d

    def substitute(self, tid: int, seq: int, call: str, result: Any) -> Any:
        """After call `seq` of thread `tid`: the recorded result in place of the live one (whose
        logits, with `verify`, are compared with the recorded ones)."""
        if tid in self.live_threads or call not in SUBSTITUTED:
            return result
        e = self.rec.get(tid, seq)
        if e is None or e.call != call or e.kind not in ("dist", "value"):
            return result
        if e.kind == "dist" and isinstance(result, Dist) and self.verify and e.logits is not None:
            live = result.logits.detach().float().cpu()
            if live.shape == e.logits.shape:
                diff = (live - e.logits.float()).abs()
                diff = diff[torch.isfinite(diff)]
                if diff.numel():
                    self.max_logit_diff = max(self.max_logit_diff, float(diff.max()))
        result = e.result(like=result)
        self.substituted += 1
        return result

    def status(self) -> dict:
        return {
            "source_pid": self.rec.source_pid,
            "substituted": self.substituted,
            "diverged": self.diverged,
            "live_threads": sorted(self.live_threads),
            "max_logit_diff": self.max_logit_diff,
            "done": self.done,
        }


class Replayer:
    """The record / replay commands of `Debugger` and the recordings and replays they keep."""

    def __init__(
        self,
        launcher: Launcher,
        breakpoints: BreakpointTable,
        stop_table: StopTable,
        process: Callable[[int], Any],
        summarize_result: Callable[[str, Any], Any],
        record_all: bool,
        max_recordings: int,
    ) -> None:
        self.launcher = launcher
        self.breakpoints = breakpoints
        self.stop_table = stop_table
        self.process = process
        self._summarize = summarize_result
        self.record_all = record_all
        self.max_recordings = max_recordings
        self._lock = threading.RLock()
        self._recordings: dict[int, Recording] = {}
        self._recording_pids: set[int] = set()
        self._replays: dict[int, ReplayState] = {}
        self._replays_done: dict[int, dict] = {}  # pid -> final replay status (no logits kept)

    # ---------------------------------------------------------------- the kernel hook's side
    @property
    def active(self) -> bool:
        return bool(self._replays or self._recording_pids)

    def is_recording(self, pid: int) -> bool:
        return pid in self._recording_pids

    def check(self, pid: int, tid: int, seq: int, call: str, args: dict, tokens: Callable) -> dict | None:
        """Before a call of a replay process: its divergence from the recording, if it diverges here."""
        rs = self._replays.get(pid)
        return rs.check(tid, seq, call, args, tokens) if rs is not None else None

    def outcome(self, pid: int, tid: int, seq: int, call: str, error: BaseException | None = None) -> dict | None:
        """After a call of a replay process: its divergence if it returned where the recording's
        raised, or the other way round."""
        rs = self._replays.get(pid)
        return rs.outcome(tid, seq, call, error) if rs is not None else None

    def keep_error(self, pid: int, tid: int, seq: int, call: str, args: dict, error: BaseException) -> None:
        """Record a call that raised, when process `pid` is recorded (a replay then knows it)."""
        rec = self._recordings.get(pid)
        if rec is not None and pid in self._recording_pids:
            rec.add(Entry(tid, seq, call, stable_args(args), kind="error", value=f"{type(error).__name__}: {error}"))

    def substitute(self, pid: int, tid: int, seq: int, call: str, result: Any) -> Any:
        rs = self._replays.get(pid)
        return rs.substitute(tid, seq, call, result) if rs is not None else result

    def keep(
        self,
        pid: int,
        tid: int,
        seq: int,
        call: str,
        args: dict,
        tokens: list[int] | None,
        result: Any,
        context: Callable[[], list[int] | None] | None = None,
    ) -> None:
        """Record a call's result, when process `pid` is recorded. `context()`: a pred's file's
        tokens before it, kept on the thread's first pred on that file (what a what-if and a
        step back need of a file the thread forked or opened)."""
        rec = self._recordings.get(pid)
        if rec is not None and pid in self._recording_pids:
            e = entry_from(tid, seq, call, args, tokens, result, self._summarize)
            if call == "pred" and context is not None and not rec.has_context(tid, e.args.get("file")):
                e.context = context()
            rec.add(e)

    def process_started(self, proc, record: bool = False) -> None:
        """A process starts: record it if asked (or if every process is recorded)."""
        if (record or self.record_all) and proc.pid not in self._recordings:
            self._new_recording(proc, complete=True)

    def process_exited(self, pid: int) -> None:
        with self._lock:
            self._recording_pids.discard(pid)
            rs = self._replays.pop(pid, None)
            if rs is not None:
                rs.done = True
                self._replays_done[pid] = rs.status()
                for old in list(self._replays_done)[: -self.max_recordings]:
                    del self._replays_done[old]

    def restarted(self, old_pid: int, proc) -> None:
        """Process `old_pid` is launched again as `proc`: recorded again if it was."""
        if old_pid in self._recording_pids or self.record_all:
            self._new_recording(proc, complete=True)

    def clear(self) -> None:
        with self._lock:
            self._replays.clear()
            self._recording_pids.clear()

    def _new_recording(self, proc, complete: bool) -> Recording:
        rec = Recording.of(proc, complete)
        with self._lock:
            self._recordings[proc.pid] = rec
            self._recording_pids.add(proc.pid)
            old = [p for p in self._recordings if p not in self._recording_pids]
            for p in old[: max(0, len(self._recordings) - self.max_recordings)]:
                del self._recordings[p]
        return rec

    # ---------------------------------------------------------------- commands
    def record(self, pid: int | None = None, enabled: bool = True) -> dict:
        """Record syscall results: of every process launched from now on (pid None), or of `pid`."""
        if pid is None:
            self.record_all = bool(enabled)
            return {"record_all": self.record_all}
        proc = self.process(pid)
        if enabled:
            started = any(t.seq > 0 for t in proc.threads)
            self._new_recording(proc, complete=not started)
        else:
            self._recording_pids.discard(pid)
        return {"pid": pid, "recording": enabled}

    def recording(self, pid: int, entries: bool = False) -> dict:
        """A summary of process `pid`'s recording (with every entry if `entries`).

        Raises:
            DebuggerError: `no recording of process <pid> (record it first)`.
        """
        return self.get_recording(pid).summary(with_entries=entries)

    def get_recording(self, pid: int) -> Recording:
        """The `Recording` object (in-process: save it, replay it later)."""
        rec = self._recordings.get(pid)
        if rec is None:
            raise DebuggerError(f"no recording of process {pid} (record it first)")
        return rec

    def save_recording(self, pid: int, path: str) -> dict:
        """Write process `pid`'s recording to `path` (JSON), for `replay(path)` later.

        Raises:
            DebuggerError: `no recording of process <pid> (record it first)`.
        """
        self.get_recording(pid).save(path)
        return {"pid": pid, "path": path}

    def replay(
        self,
        source: int | Recording | str,
        stop_at: int | None = None,
        tid: int = 1,
        stop_on_entry: bool | None = None,
        verify: bool = True,
        record: bool = True,
    ) -> dict:
        """Run a recorded process again, handing it the recorded syscall results.

        `source`: a pid whose run was recorded, a `Recording`, or a path saved by
        `save_recording`. `stop_at=k` stops thread `tid` right after its k-th `pred` returns
        (0: on entry; the stop's reason is "replay"). Past the end of the recording (or after a
        divergence) the run goes live.
        """
        return self._replay(source, stop_at, tid, stop_on_entry, verify, record, "replay")

    def _replay(self, source, stop_at, tid, stop_on_entry, verify, record, why: str) -> dict:
        if isinstance(source, Recording):
            rec = source
        elif isinstance(source, str):
            rec = Recording.load(source)
        else:
            rec = self.get_recording(source)
        if rec.fn is None:
            raise DebuggerError("this recording's LIP function is not available in this process")
        if not rec.complete:
            raise DebuggerError(f"the recording of process {rec.source_pid} started mid-run: it cannot be replayed")
        if stop_at is not None and stop_at < 0:
            raise DebuggerError(f"stop_at must be >= 0, got {stop_at}")

        def setup(proc) -> None:
            with self._lock:
                self._replays[proc.pid] = ReplayState(rec, verify)
            for m in rec.received():
                proc.send(m)
            if stop_at:
                self.breakpoints.set_breakpoint(
                    "pred", pid=proc.pid, tid=tid, hit_count=stop_at, when="after", temporary=True, reason=why
                )
            if record:
                self._new_recording(proc, complete=True)

        proc = self.launcher.launch_again(rec, stop_on_entry=bool(stop_on_entry) or stop_at == 0, setup=setup)
        return {"pid": proc.pid, "source_pid": rec.source_pid, "stop_at": stop_at, "tid": tid}

    def replay_status(self, pid: int) -> dict:
        """How far replay process `pid` has got, and whether it diverged from the recording.

        Raises:
            DebuggerError: `process <pid> is not a replay`.
        """
        rs = self._replays.get(pid)
        st = rs.status() if rs is not None else self._replays_done.get(pid)
        if st is None:
            raise DebuggerError(f"process {pid} is not a replay")
        return {"pid": pid, **st}

    def step_back(self, pid: int, tid: int = 1, steps: int = 1) -> dict:
        """Go back `steps` preds: replay the recorded run into a new process that stops right after
        thread `tid`'s earlier pred (reason "step_back"); the current process is cancelled. Needs
        a recording.

        Raises:
            DebuggerError: `nothing to step back: thread <tid> of process <pid> has returned no
                pred yet` (the process is left as it is); `cannot step back <n> pred(s) …`.
        """
        s = self.stop_table.find(pid, tid)
        if s.thread.preds == 0:
            raise DebuggerError(f"nothing to step back: thread {tid} of process {pid} has returned no pred yet")
        rec = self.get_recording(pid)
        rs = self._replays.get(pid)
        if rs is not None:  # a replay: what it has run so far, then the rest of its source
            rec = rs.rec.merged(rec)
        done = s.thread.preds
        target = done - steps if (s.where == "after" and s.call == "pred") else done - steps + 1
        if target < 0 or steps < 1:
            raise DebuggerError(f"cannot step back {steps} pred(s) from pred {done} of {pid}.{tid}")
        if (
            s.where == "after" and self.get_recording(pid).get(tid, s.seq) is None
        ):  # held, not kept yet: its override too
            rec.add(entry_from(tid, s.seq, s.call or "", s.args, s.tokens, s.result, self._summarize))
        proc = self.process(pid)
        proc.cancel("replaced by a step back")
        proc.wait(10)
        r = self._replay(rec, target, tid, None, True, True, "step_back")
        return {**r, "from_pid": pid, "target_pred": target}


__all__ = ["ReplayState", "Replayer"]
