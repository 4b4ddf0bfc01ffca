/**
 * Front-end state of the sidebar and widgets: which actions each thread offers, a short status
 * line, and the merge of live `lab_view` snapshots. The shapes are the protocol's, generated from
 * the Python schema (./generated/protocol.ts; the Python front-ends fold the same events in
 * symphony_lab/session_state.py). Pure functions (tested with Jest).
 */

import type * as P from './generated/protocol';

export type {
  ContinuedEvent,
  DistResult,
  EventBodies,
  KernelEvent,
  OverriddenEvent,
  Stop,
  TakenEvent,
  TokenPick,
  TopToken
} from './generated/protocol';
export { EVENT_NAMES } from './generated/protocol';

export type ThreadView = P.ThreadView;

type ProcessKey = 'pid' | 'name' | 'status' | 'threads';

/** A process as the front-ends hold it: the protocol's `ProcessView`; a process known only from
 * its events so far lacks what `threads` adds (user, priority, tokens). */
export type ProcessView = Pick<P.ProcessView, ProcessKey> & Partial<Omit<P.ProcessView, ProcessKey>>;

type StopKey = 'stop_id' | 'pid' | 'tid' | 'reason' | 'where' | 'call' | 'file' | 'line';

/** Source lines around a stop (the lab adds them to its snapshot's stops). */
export interface StopSource {
  file: string;
  line: number;
  lines: Array<{ n: number; text: string; current: boolean }>;
}

/** A stop as the front-ends hold it: the protocol's `Stop` (the `stopped` event's body), and the
 * source lines the lab's snapshot adds. */
export type StopView = Pick<P.Stop, StopKey> & Partial<Omit<P.Stop, StopKey>> & { source?: StopSource | null };

/** A stop's result when it is a distribution (after a `pred`), else null. */
export function distResult(result: unknown): P.DistResult | null {
  if (result !== null && typeof result === 'object' && !Array.isArray(result) && (result as { kind?: unknown }).kind === 'dist') {
    return result as P.DistResult;
  }
  return null;
}

export interface Actions {
  step: boolean;
  continue: boolean;
  pause: boolean;
  override: boolean;
}

/** The run widget's stepping keys (while it has focus), shown in its buttons' tooltips. */
export const STEP_KEYS = {
  step: 's',
  step_over: 'v',
  step_out: 'f',
  continue: 'c',
  pause: 'p',
  step_back: 'u'
} as const;

/** What a thread can be asked to do in its current state. */
export function threadActions(t: ThreadView | undefined, stop?: StopView | null): Actions {
  if (!t) {
    return { step: false, continue: false, pause: false, override: false };
  }
  const stopped = !!t.stopped || !!stop;
  const live = !['finished', 'failed'].includes(t.state);
  const where = stop?.where ?? t.stopped?.where;
  const call = stop?.call;
  return {
    step: stopped,
    continue: stopped,
    pause: live && !stopped,
    override: stopped && (where === 'after' ? distResult(stop?.result) !== null || stop === undefined : where === 'before' && call === 'pred')
  };
}

/** A one-line description of a stop: "stopped after pred (step) at beam.py:57". */
export function describeStop(s: StopView): string {
  const at = s.file ? ` at ${s.file.split('/').pop()}:${s.line ?? '?'}` : '';
  const what = s.where === 'entry' ? 'on entry' : `${s.where} ${s.call ?? 'syscall'}`;
  const reason = (s.reasons ?? []).includes('follow') ? 'step into thread' : s.reason;
  return `thread ${s.pid}.${s.tid} stopped ${what} (${reason})${at}`;
}

export function statusBadge(status: string): string {
  const colours: Record<string, string> = {
    running: '#2e86c1',
    stopped: '#e67e22',
    finished: '#27ae60',
    failed: '#c0392b',
    cancelled: '#7f8c8d',
    queued: '#8e44ad',
    parked: '#8e44ad',
    starting: '#95a5a6'
  };
  return colours[status] ?? '#95a5a6';
}

/** The process's first stop (the one the widget's buttons act on). */
export function primaryStop(stops: StopView[], pid: number | null): StopView | null {
  const mine = stops.filter(s => pid === null || s.pid === pid);
  if (!mine.length) {
    return null;
  }
  return mine.slice().sort((a, b) => a.tid - b.tid || a.stop_id - b.stop_id)[0];
}

/** The chosen token and the top-k of a stop after a pred, if it has one. */
export function stopDist(s: StopView | null): { chosen: P.TokenPick; topk: P.TopToken[] } | null {
  const d = distResult(s?.result);
  return d && { chosen: d.chosen, topk: d.topk ?? [] };
}

type BreakpointKey = 'id' | 'call' | 'hits';

/** A breakpoint as the lab's snapshot lists it: the protocol's `Breakpoint`. */
export type BreakpointView = Pick<P.Breakpoint, BreakpointKey> & Partial<Omit<P.Breakpoint, BreakpointKey>>;

/** The breakpoints worth listing: one bound to a process that has ended can never hit again. */
export function liveBreakpoints(bps: BreakpointView[], procs: ProcessView[]): BreakpointView[] {
  const ended = new Set(procs.filter(p => p.done || ['finished', 'failed', 'cancelled'].includes(p.status)).map(p => p.pid));
  return bps.filter(b => b.pid === null || b.pid === undefined || !ended.has(b.pid));
}

/** A process's threads split for the sidebar: the ones still running or stopped, and the
 * finished ones (shown collapsed under their process). */
export function splitThreads(p: ProcessView, stops: StopView[]): { live: ThreadView[]; finished: ThreadView[] } {
  const done = (t: ThreadView) =>
    !stops.some(s => s.pid === p.pid && s.tid === t.tid) && (p.done || ['finished', 'failed'].includes(t.state));
  return { live: p.threads.filter(t => !done(t)), finished: p.threads.filter(done) };
}
