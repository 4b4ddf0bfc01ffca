/**
 * The sidebar's session model, folded from the debugger's event stream (docs/protocol.md,
 * "Events") as symphony_lab/session_state.py folds it for the Python front-ends: processes and
 * their threads (process_start / thread_start / thread_exit / process_exit), the stops still
 * held (stopped / continued / overridden / process_exit). The lab's `lab_view` snapshots resync
 * it (and bring what no event carries: breakpoints, the KV tree, the scheduler timeline); events
 * newer than a snapshot are folded again on top of it, so a snapshot built before an event but
 * delivered after it never brings back a stop that has been continued. Pure (tested with Jest).
 */

import { BreakpointView, ProcessView, StopView, ThreadView } from './state';

export interface EventLike {
  event: string;
  ts?: number;
  body: any;
}

export interface LabSnapshot {
  processes?: ProcessView[];
  stops?: StopView[];
  breakpoints?: BreakpointView[];
  kv_tree?: any;
  timeline?: any;
  engine?: any;
  runs?: RunInfo[];
  ts?: number;
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
  kvTree: any = null;
  timeline: any = null;
  engine: any = null;
  runs: RunInfo[] = [];
  /** events folded since the model was made (a front-end may skip a redraw when it has not moved) */
  folded = 0;
  private snapshotTs = -Infinity;
  private pending: EventLike[] = []; // events newer than the last snapshot

  /** Fold one event message; returns whether it changed anything the sidebar shows. */
  apply(msg: EventLike): boolean {
    if (msg.event === 'lab_view') {
      this.resync(msg.body ?? {});
      return true;
    }
    const ts = msg.ts ?? msg.body?.ts;
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
      this.pending = this.pending.filter(e => typeof (e.ts ?? e.body?.ts) !== 'number' || (e.ts ?? e.body?.ts) > v.ts!);
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
    const b = msg.body ?? {};
    const { pid, tid } = b;
    this.folded++;
    switch (msg.event) {
      case 'stopped': {
        this.stops.set(b.stop_id, b as StopView);
        const t = this.thread(this.process(pid, b.process ?? ''), tid);
        t.stopped = { stop_id: b.stop_id, reason: b.reason, where: b.where };
        t.call = b.call ?? t.call;
        return true;
      }
      case 'continued': {
        this.stops.delete(b.stop_id);
        const t = this.processes.get(pid)?.threads.find(x => x.tid === tid);
        if (t && t.stopped?.stop_id === b.stop_id) {
          t.stopped = null;
          t.state = 'running';
        }
        return true;
      }
      case 'overridden': {
        const s = this.stops.get(b.stop_id);
        if (s && b.result) {
          this.stops.set(b.stop_id, { ...s, result: b.result });
        }
        return !!s;
      }
      case 'process_start':
      case 'thread_start': {
        const name = b.args?.name ?? '';
        const p = this.process(pid, msg.event === 'process_start' ? name : '');
        if (msg.event === 'process_start') {
          p.name = name || p.name;
          p.status = 'running';
        }
        this.thread(p, tid, name);
        return true;
      }
      case 'thread_exit': {
        const t = this.processes.get(pid)?.threads.find(x => x.tid === tid);
        if (t) {
          t.state = b.error ? 'failed' : 'finished';
          t.stopped = null;
        }
        return !!t;
      }
      case 'process_exit': {
        const p = this.process(pid);
        p.done = true;
        p.error = b.error ?? null;
        p.status = b.args?.status ?? (b.error ? 'failed' : 'finished');
        p.threads.forEach(t => {
          t.state = t.state === 'failed' ? 'failed' : 'finished';
          t.stopped = null;
        });
        [...this.stops.values()].filter(s => s.pid === pid).forEach(s => this.stops.delete(s.stop_id));
        return true;
      }
      default:
        this.folded--;
        return false;
    }
  }

  /** The processes, oldest first (as `lab_view` lists them). */
  processList(): ProcessView[] {
    return [...this.processes.values()].sort((a, b) => a.pid - b.pid);
  }

  stopList(): StopView[] {
    return [...this.stops.values()].sort((a, b) => a.stop_id - b.stop_id);
  }
}
