/**
 * Front-end state of the sidebar and widgets: which actions each thread offers, a short status
 * line, and the merge of live `lab_view` snapshots. Pure functions (tested with Jest).
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
  return `thread ${s.pid}.${s.tid} stopped ${what} (${s.reason})${at}`;
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
