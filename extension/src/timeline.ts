/**
 * The scheduler timeline: every fired batch is a bar (x: time, height: number of members,
 * one coloured segment per member process), with queue depth and pages in use drawn as
 * lines beneath. Pure functions over the debugger's `timeline` snapshot.
 */

import { escapeHtml } from './tokens';

export interface BatchMember {
  pid: number | null;
  tid: number | null;
  user?: string;
  file: number;
  tokens: number;
  kind: string;
  chunk?: [number, number, number];
}

export interface BatchRec {
  bid: number;
  t_start: number;
  t_end: number;
  members: BatchMember[];
  tokens: number;
  queue_depth: number;
  pages_used: number;
  pages_total: number;
  policy?: string;
  size?: number;
}

export interface Timeline {
  batches: BatchRec[];
  queue?: Array<{ pid: number; tid: number; file: number; remaining: number; kind: string }>;
  queue_depth: number;
  pages_used: number;
  pages_total: number;
  policy?: string;
  token_budget?: number;
  totals?: { batches: number; tokens: number; members: number };
}

/** Append new batches to what we have (dropping duplicates), keeping the newest `max`. */
export function mergeBatches(have: BatchRec[], incoming: BatchRec[], max = 400): BatchRec[] {
  const last = have.length ? have[have.length - 1].bid : -1;
  const out = have.concat(incoming.filter(b => b.bid > last));
  return out.length > max ? out.slice(out.length - max) : out;
}

export function pidColor(pid: number | null): string {
  if (pid === null) {
    return '#999';
  }
  return `hsl(${Math.round((pid * 67.3 + 200) % 360)}, 60%, 52%)`;
}

/** Members of one batch grouped by process: [[pid, count, tokens], ...] sorted by pid. */
export function membersByPid(b: BatchRec): Array<[number | null, number, number]> {
  const m = new Map<number | null, [number, number]>();
  for (const x of b.members) {
    const cur = m.get(x.pid) ?? [0, 0];
    m.set(x.pid, [cur[0] + 1, cur[1] + x.tokens]);
  }
  return [...m.entries()]
    .sort((a, c) => (a[0] ?? -1) - (c[0] ?? -1))
    .map(([pid, [n, t]]) => [pid, n, t]);
}

export function batchTitle(b: BatchRec): string {
  const who = b.members
    .map(m => `pid ${m.pid}.${m.tid} file #${m.file} ${m.kind} ${m.tokens} tok`)
    .join('\n');
  return `batch ${b.bid}: ${b.members.length} members, ${b.tokens} tokens, ${((b.t_end - b.t_start) * 1000).toFixed(1)} ms\nqueue ${b.queue_depth}, pages ${b.pages_used}/${b.pages_total}\n${who}`;
}

/**
 * The timeline as SVG. Bars are laid out by batch order when `byIndex` (readable when
 * batches are short and far apart), else by time.
 */
export function renderTimelineSvg(tl: Timeline, width = 520, height = 170, byIndex = true): string {
  const bs = tl.batches;
  if (!bs.length) {
    return '<div class="sl-empty">no batches yet</div>';
  }
  const barsH = Math.round(height * 0.6);
  const linesTop = barsH + 10;
  const linesH = height - linesTop - 4;
  const n = bs.length;
  const t0 = bs[0].t_start;
  const t1 = Math.max(bs[n - 1].t_end, t0 + 1e-6);
  const left = 4;
  const w = width - 8;
  const slot = Math.min(w / n, 24);
  const xOf = (b: BatchRec, i: number): [number, number] =>
    byIndex
      ? [left + i * slot, Math.max(1, slot - 1)]
      : [left + ((b.t_start - t0) / (t1 - t0)) * w, Math.max(1, ((b.t_end - b.t_start) / (t1 - t0)) * w)];
  const maxSize = Math.max(1, ...bs.map(b => b.members.length));
  const parts: string[] = [
    `<svg class="sl-timeline" xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`
  ];
  bs.forEach((b, i) => {
    const [x, bw] = xOf(b, i);
    let y = barsH;
    parts.push(`<g class="sl-batch" data-bid="${b.bid}"><title>${escapeHtml(batchTitle(b))}</title>`);
    for (const [pid, count] of membersByPid(b)) {
      const h = (count / maxSize) * (barsH - 4);
      y -= h;
      parts.push(`<rect x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${bw.toFixed(1)}" height="${h.toFixed(1)}" fill="${pidColor(pid)}"/>`);
    }
    parts.push('</g>');
  });
  const maxQ = Math.max(1, ...bs.map(b => b.queue_depth));
  const maxP = Math.max(1, ...bs.map(b => b.pages_total || b.pages_used));
  const line = (val: (b: BatchRec) => number, max: number) =>
    bs
      .map((b, i) => {
        const [x, bw] = xOf(b, i);
        return `${(x + bw / 2).toFixed(1)},${(linesTop + linesH - (val(b) / max) * linesH).toFixed(1)}`;
      })
      .join(' ');
  parts.push(`<line x1="${left}" y1="${barsH + 4}" x2="${left + w}" y2="${barsH + 4}" stroke="#ccc"/>`);
  parts.push(`<polyline class="sl-queue-line" points="${line(b => b.queue_depth, maxQ)}" fill="none" stroke="#c0392b" stroke-width="1.5"><title>queue depth (max ${maxQ})</title></polyline>`);
  parts.push(`<polyline class="sl-pages-line" points="${line(b => b.pages_used, maxP)}" fill="none" stroke="#2471a3" stroke-width="1.5"><title>pages in use (of ${maxP})</title></polyline>`);
  parts.push('</svg>');
  return parts.join('');
}

export function renderTimelineLegend(tl: Timeline): string {
  const tot = tl.totals;
  const pids = [...new Set(tl.batches.flatMap(b => b.members.map(m => m.pid)))].sort((a, b) => (a ?? -1) - (b ?? -1));
  const keys = pids
    .map(pid => `<span class="sl-key sl-pid-key" data-pid="${pid ?? ''}" style="color:${pidColor(pid)}">■ pid ${pid ?? '?'}</span>`)
    .join(' ');
  return (
    `<div class="sl-legend">${keys ? keys + ' · ' : ''}<span class="sl-key" style="color:#c0392b">━ queue depth</span> ` +
    `<span class="sl-key" style="color:#2471a3">━ pages in use</span> · ` +
    `${tot ? tot.batches : tl.batches.length} batches${tot ? `, ${tot.tokens} tokens` : ''} · queue now ${tl.queue_depth} · ` +
    `pages ${tl.pages_used}/${tl.pages_total}${tl.policy ? ' · policy ' + escapeHtml(tl.policy) : ''}</div>`
  );
}
