/**
 * Front-end state of the sidebar and widgets: which actions each thread offers, a short status
 * line, and the merge of live `lab_view` snapshots; and the debugger's event schema, mirrored
 * from docs/protocol.md (the Python front-ends fold the same events in
 * symphony_lab/session_state.py). Pure functions (tested with Jest).
 */

export interface ThreadView {
  tid: number;
  name: string;
  state: string;
  call: string | null;
  preds: number;
  stopped?: { stop_id: number; reason: string; where: string } | null;
}

export interface ProcessView {
  pid: number;
  name: string;
  user?: string;
  status: string;
  threads: ThreadView[];
  tokens?: number;
  error?: string | null;
  done?: boolean;
}

export interface StopView {
  stop_id: number;
  pid: number;
  tid: number;
  process?: string;
  reason: string;
  where: string;
  call: string | null;
  file: string | null;
  line: number | null;
  input?: { ids: number[]; text: string; n_tokens?: number } | null;
  result?: any;
  source?: { file: string; line: number; lines: Array<{ n: number; text: string; current: boolean }> } | null;
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
    override: stopped && (where === 'after' ? stop?.result?.kind === 'dist' || stop === undefined : where === 'before' && call === 'pred')
  };
}

/** A one-line description of a stop: "stopped after pred (step) at beam.py:57". */
export function describeStop(s: StopView): string {
  const at = s.file ? ` at ${s.file.split('/').pop()}:${s.line ?? '?'}` : '';
  const what = s.where === 'entry' ? 'on entry' : `${s.where} ${s.call ?? 'syscall'}`;
  const reason = ((s as any).reasons ?? []).includes('follow') ? 'step into thread' : s.reason;
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
export function stopDist(s: StopView | null): { chosen: any; topk: any[] } | null {
  if (!s || !s.result || s.result.kind !== 'dist') {
    return null;
  }
  return { chosen: s.result.chosen, topk: s.result.topk ?? [] };
}

// --- the debugger's event schema (docs/protocol.md "Events"; the Python side folds the same
// stream in symphony_lab/session_state.py) -------------------------------------------------------

export interface TokenPick {
  token: number;
  text: string;
  p: number;
  by?: 'override' | 'engine' | 'fed' | 'argmax';
}

/** A stop's distribution: what the model preferred (argmax) and, once known, what the program took. */
export interface DistView {
  kind: 'dist';
  positions: number;
  position: number;
  topk: Array<{ token: number; text: string; p: number; logit: number }>;
  preferred: TokenPick;
  taken: TokenPick | null;
  chosen: TokenPick;
  entropy: number;
}

export interface StoppedEvent extends StopView {
  reasons: string[]; // ["step", "follow"]: a step that followed into a spawned thread
  seq: number;
  preds?: number;
  breakpoints?: number[];
}

export interface ContinuedEvent {
  pid: number;
  tid: number;
  stop_id: number;
  action: 'continue' | 'step' | 'step_over' | 'step_out' | 'step_syscall' | 'killed' | 'detach';
  stopped_for: number;
}

export interface OverriddenEvent {
  pid: number;
  tid: number;
  stop_id: number;
  edit: Record<string, unknown>;
  result: DistView;
}

/** The token a program took after a stop whose `taken` was not known then (it sampled itself). */
export interface TakenEvent {
  pid: number;
  tid: number;
  stop_id: number;
  seq: number;
  token: number;
  text: string;
  by: 'fed';
}

export interface KernelEvent {
  kind: string;
  ts: number;
  pid: number;
  tid: number;
  call?: string | null;
  args?: Record<string, any>;
  result?: any;
  error?: string | null;
  file?: string | null;
  line?: number | null;
  seq?: number;
}

export interface EventBodies {
  stopped: StoppedEvent;
  continued: ContinuedEvent;
  overridden: OverriddenEvent;
  taken: TakenEvent;
  batch_pending: Record<string, any>;
  replay_diverged: { pid: number; tid: number; seq: number; call: string; why: string };
  view: { view: 'kv_tree' | 'timeline'; data: any };
  syscall_enter: KernelEvent;
  syscall_exit: KernelEvent;
  process_start: KernelEvent;
  process_exit: KernelEvent;
  thread_start: KernelEvent;
  thread_exit: KernelEvent;
  batch: KernelEvent;
}

export const EVENT_NAMES: Array<keyof EventBodies> = [
  'stopped', 'continued', 'overridden', 'taken', 'batch_pending', 'replay_diverged', 'view',
  'syscall_enter', 'syscall_exit', 'process_start', 'process_exit', 'thread_start', 'thread_exit', 'batch'
];

export interface BreakpointView {
  id: number;
  call: string;
  pid?: number | null;
  tid?: number | null;
  hits: number;
  hit_count?: number | null;
  hit_mode?: string;
  temporary?: boolean;
}

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
