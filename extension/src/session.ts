/**
 * The sidebar's session model, folded from the debugger's event stream (docs/protocol.md,
 * "Events") as symphony_lab/session_state.py folds it for the Python front-ends: processes and
 * their threads (process_start / thread_start / thread_exit / process_exit), the stops still
 * held (stopped / continued / overridden / process_exit). The lab's `lab_view` snapshots resync
 * it (and bring what no event carries: breakpoints, the KV tree, the scheduler timeline); events
 * newer than a snapshot are folded again on top of it, so a snapshot built before an event but
 * delivered after it never brings back a stop that has been continued. Pure (tested with Jest).
 */

import type * as P from './generated/protocol';
import { BreakpointView, ProcessView, StopView, ThreadView } from './state';

/** An event message as it arrives (checked only for its `event` name: see protocol.ts). */
export interface EventLike {
  event: string;
  ts?: number;
  body?: unknown;
}

/** The lab's `lab_view`: the debugger's one snapshot (symphony_lab/debugger/snapshot.py, generated
 * as `DebuggerSnapshot`), with the notebook's engine and runs beside it. */
export interface LabSnapshot extends Partial<P.DebuggerSnapshot> {
  engine?: { ready?: boolean; model?: string; [key: string]: P.Json | undefined } | null;
  runs?: RunInfo[];
}

/** A notebook run the sidebar can profile or explore (`lab_view`'s `runs`). */
export interface RunInfo {
  pid: number;
  name: string;
  profiled: boolean;
  recorded: boolean;
}

const MAX_PROCESSES = 50;
const MAX_PENDING = 2000;

export class SessionModel {
  processes = new Map<number, ProcessView>();
  stops = new Map<number, StopView>();
  breakpoints: BreakpointView[] = [];
  kvTree: P.KVTree | null = null;
  timeline: P.Timeline | null = null;
  engine: LabSnapshot['engine'] = null;
  runs: RunInfo[] = [];
  /** events folded since the model was made (a front-end may skip a redraw when it has not moved) */
  folded = 0;
  private snapshotTs = -Infinity;
  private pending: EventLike[] = []; // events newer than the last snapshot

  /** Fold one event message; returns whether it changed anything the sidebar shows. */
  apply(msg: EventLike): boolean {
    if (msg.event === 'lab_view') {
      this.resync((msg.body ?? {}) as LabSnapshot);
      return true;
    }
    const ts = eventTs(msg);
    if (typeof ts === 'number' && ts <= this.snapshotTs) {
      return false; // the snapshot already holds it
    }
    this.pending.push(msg);
    if (this.pending.length > MAX_PENDING) {
      this.pending.splice(0, this.pending.length - MAX_PENDING);
    }
    return this.fold(msg);
  }

  /** Take a `lab_view` snapshot as the base, then fold again the events that came after it. */
  resync(v: LabSnapshot): void {
    if (v.processes) {
      this.processes = new Map(v.processes.map(p => [p.pid, { ...p, threads: p.threads.map(t => ({ ...t })) }]));
    }
    if (v.stops) {
      this.stops = new Map(v.stops.map(s => [s.stop_id, s]));
    }
    this.breakpoints = v.breakpoints ?? this.breakpoints;
    this.kvTree = v.kv_tree ?? this.kvTree;
    this.timeline = v.timeline ?? this.timeline;
    this.engine = v.engine ?? this.engine;
    this.runs = v.runs ?? this.runs;
    if (typeof v.ts === 'number') {
      this.snapshotTs = v.ts;
      const since = v.ts;
      this.pending = this.pending.filter(e => {
        const t = eventTs(e);
        return typeof t !== 'number' || t > since;
      });
    }
    this.pending.forEach(e => this.fold(e));
  }

  private process(pid: number, name = ''): ProcessView {
    let p = this.processes.get(pid);
    if (!p) {
      p = { pid, name, status: 'running', threads: [], done: false };
      this.processes.set(pid, p);
      const extra = this.processes.size - MAX_PROCESSES;
      if (extra > 0) {
        [...this.processes.keys()].slice(0, extra).forEach(k => this.processes.delete(k));
      }
    }
    return p;
  }

  private thread(p: ProcessView, tid: number, name = ''): ThreadView {
    let t = p.threads.find(x => x.tid === tid);
    if (!t) {
      t = { tid, name, state: 'running', call: null, preds: 0, stopped: null };
      p.threads.push(t);
      p.threads.sort((a, b) => a.tid - b.tid);
    }
    return t;
  }

  private fold(msg: EventLike): boolean {
    if (msg.body === null || typeof msg.body !== 'object') {
      return false;
    }
    const e = msg as P.Event; // an event of another name falls to `default`
    this.folded++;
    switch (e.event) {
      case 'stopped': {
        const b = e.body;
        this.stops.set(b.stop_id, b);
        const t = this.thread(this.process(b.pid, b.process ?? ''), b.tid);
        t.stopped = { stop_id: b.stop_id, reason: b.reason, where: b.where };
        t.call = b.call ?? t.call;
        return true;
      }
      case 'continued': {
        const b = e.body;
        this.stops.delete(b.stop_id);
        const t = this.processes.get(b.pid)?.threads.find(x => x.tid === b.tid);
        if (t && t.stopped?.stop_id === b.stop_id) {
          t.stopped = null;
          t.state = 'running';
        }
        return true;
      }
      case 'overridden': {
        const b = e.body;
        const s = this.stops.get(b.stop_id);
        if (s && b.result) {
          this.stops.set(b.stop_id, { ...s, result: b.result });
        }
        return !!s;
      }
      case 'process_start':
      case 'thread_start': {
        const b = e.body;
        if (b.pid === null) {
          break;
        }
        const name = typeof b.args?.name === 'string' ? b.args.name : '';
        const p = this.process(b.pid, e.event === 'process_start' ? name : '');
        if (e.event === 'process_start') {
          p.name = name || p.name;
          p.status = 'running';
        }
        this.thread(p, b.tid ?? 1, name);
        return true;
      }
      case 'thread_exit': {
        const b = e.body;
        const t = this.processes.get(b.pid ?? -1)?.threads.find(x => x.tid === b.tid);
        if (t) {
          t.state = b.error ? 'failed' : 'finished';
          t.stopped = null;
        }
        return !!t;
      }
      case 'process_exit': {
        const b = e.body;
        if (b.pid === null) {
          break;
        }
        const pid = b.pid;
        const p = this.process(pid);
        p.done = true;
        p.error = b.error ?? null;
        const status = b.args?.status;
        p.status = typeof status === 'string' ? status : b.error ? 'failed' : 'finished';
        p.threads.forEach(t => {
          t.state = t.state === 'failed' ? 'failed' : 'finished';
          t.stopped = null;
        });
        [...this.stops.values()].filter(s => s.pid === pid).forEach(s => this.stops.delete(s.stop_id));
        return true;
      }
    }
    this.folded--;
    return false;
  }

  /** The processes, oldest first (as `lab_view` lists them). */
  processList(): ProcessView[] {
    return [...this.processes.values()].sort((a, b) => a.pid - b.pid);
  }

  stopList(): StopView[] {
    return [...this.stops.values()].sort((a, b) => a.stop_id - b.stop_id);
  }
}

/** An event's time: the message's, or its body's (the engine's events carry their own). */
function eventTs(e: EventLike): number | undefined {
  if (typeof e.ts === 'number') {
    return e.ts;
  }
  const ts = e.body !== null && typeof e.body === 'object' ? (e.body as { ts?: unknown }).ts : undefined;
  return typeof ts === 'number' ? ts : undefined;
}
