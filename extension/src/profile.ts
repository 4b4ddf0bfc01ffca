/**
 * The LIP profiler's line table and the what-if explorer's side-by-side continuations, as HTML
 * strings (the run widget's Profile and What-if tabs and the sidebar draw them the same way),
 * from the debugger protocol's `profile` and `what_if` bodies (docs/protocol.md, "Profiling and
 * what-if"; symphony_lab/debugger/protocol_bodies.py): the lines come picked and sorted there.
 */

import type * as P from './generated/protocol';
import { escapeHtml, showText } from './tokens';

// What the renderers read of the protocol's `profile` and `what_if` bodies: picked from the
// generated types, so a field renamed in the Python schema fails to compile here.

/** Seconds per bucket and the counts (`TimesBody`). */
export type TimesBody = P.TimesBody;

type LineKey = 'pid' | 'tid' | 'file' | 'line' | 'function' | 'inclusive' | keyof P.TimesBody;

/** A line of the profile; `name` is how the file is shown (a notebook cell's `In[3]`), `text`
 * the source line (added where the source is: a notebook's kernel). */
export type ProfileLine = Pick<P.ProfileLineBody, LineKey> & Partial<Pick<P.ProfileLineBody, 'name'>> & { text?: string };

export type ProfileThread = Pick<P.ProfileThreadBody, 'pid' | 'tid' | 'name' | 'wall' | 'dropped' | keyof P.TimesBody>;

export type ProfileBody = Pick<P.ProfileBody, 'pid' | 'profiling' | 'done' | 'lines_total'> & {
  threads: ProfileThread[];
  lines: ProfileLine[];
};

export type WhatIfBody = Pick<
  P.WhatIfBody,
  | 'pid'
  | 'tid'
  | 'position'
  | 'token'
  | 'original_token'
  | 'original'
  | 'alternative'
  | 'token_texts'
  | 'diverge_at'
  | 'reproduces_recording'
  | 'shared_pages'
  | 'prefix_pages'
  | 'recomputed_prefix'
>;

/** The profiler's buckets (symphony_lab/profiler/profile.py BUCKETS) and their colours. */
export const BUCKETS = ['queue', 'forward', 'own', 'blocking', 'kernel'] as const;
export const BUCKET_COLOURS: Record<string, string> = {
  queue: '#f2b134',
  forward: '#4a90d9',
  own: '#5cb85c',
  blocking: '#d9534f',
  kernel: '#999'
};

const ms = (seconds: number | undefined): string => ((seconds ?? 0) * 1e3).toFixed(1);
const basename = (f: string): string => f.split('/').pop() ?? f;

/** The lines of one thread (`tid`), or of every thread (`null`). */
export function profileRows(v: ProfileBody, tid: number | null): ProfileLine[] {
  return v.lines.filter(r => tid === null || r.tid === tid);
}

/**
 * The line table: per line and thread, total ms, each bucket, preds, tokens fed and a stacked bar
 * of the buckets; `compact` (the sidebar) keeps the buckets in the bar's tooltips only.
 */
export function renderProfileTable(v: ProfileBody | null | undefined, tid: number | null = null, barWidth = 160, compact = false): string {
  if (!v) {
    return '<div class="sl-empty">not profiled: launch with lab.run(..., profile=True), or start profiling it</div>';
  }
  const rows = profileRows(v, tid);
  if (!rows.length) {
    return '<div class="sl-empty">no profiled lines yet</div>';
  }
  const most = Math.max(...rows.map(r => r.total)) || 1;
  const legend = BUCKETS.map(b => `<span class="sl-prof-key" style="color:${BUCKET_COLOURS[b]}">■ ${b}</span>`).join(' ');
  const cols = compact ? [] : BUCKETS;
  const head =
    `<tr><th>line</th><th>thr</th><th>ms</th>` +
    cols.map(b => `<th class="sl-prof-b">${b}</th>`).join('') +
    `<th>preds</th><th>tok</th><th>${compact ? '' : legend}</th></tr>`;
  const body = rows
    .map(r => {
      const split = BUCKETS.map(b => `${b} ${ms(r[b])}`).join(', ');
      const bar = BUCKETS.map(b => {
        const w = (barWidth * r[b]) / most;
        return w >= 0.5
          ? `<span title="${b} ${ms(r[b])} ms" style="display:inline-block;height:10px;background:${BUCKET_COLOURS[b]};width:${w.toFixed(1)}px"></span>`
          : '';
      }).join('');
      return (
        `<tr class="sl-prof-row" data-tid="${r.tid}" data-line="${r.line}" title="${escapeHtml(r.file)}: ${split} ms">` +
        `<td><code>${escapeHtml(r.name ?? basename(r.file))}:${r.line}</code> ${escapeHtml(r.function)}` +
        (r.text ? `<div class="sl-prof-src"><code>${escapeHtml(r.text)}</code></div>` : '') +
        `</td><td>${r.pid}.${r.tid}</td><td class="sl-prof-total">${ms(r.total)}</td>` +
        cols.map(b => `<td class="sl-prof-b">${ms(r[b])}</td>`).join('') +
        `<td>${r.preds}</td><td>${r.tokens}</td><td class="sl-prof-bar">${bar}</td></tr>`
      );
    })
    .join('');
  const threads = v.threads
    .filter(t => tid === null || t.tid === tid)
    .map(
      t =>
        `<div class="sl-prof-thread">thread ${t.pid}.${t.tid} ${escapeHtml(t.name)}: wall ${ms(t.wall)} ms = ` +
        BUCKETS.map(b => `${b} ${ms(t[b])}`).join(' + ') +
        ` · ${t.preds} preds, ${t.tokens} tokens fed</div>`
    )
    .join('');
  const left = v.lines_total - v.lines.length;
  const more = left > 0 && tid === null ? `<div class="sl-note">${left} more line${left === 1 ? '' : 's'} not shown</div>` : '';
  const legendLine = compact ? `<div class="sl-prof-legend">${legend}</div>` : '';
  return `${legendLine}<table class="sl-prof-table"><thead>${head}</thead><tbody>${body}</tbody></table>${more}${threads}`;
}

/** The threads of a profile, for a thread picker. */
export function profileThreads(v: ProfileBody | null | undefined): number[] {
  return v ? Array.from(new Set(v.threads.map(t => t.tid).concat(v.lines.map(r => r.tid)))).sort((a, b) => a - b) : [];
}

function continuation(texts: string[], ids: number[], divergeAt: number | null): string {
  return texts
    .map((text, i) => {
      const cls = divergeAt === null || i < divergeAt ? 'sl-wi-same' : i === divergeAt ? 'sl-wi-diverge' : 'sl-wi-after';
      return `<span class="sl-wi-tok ${cls}" data-i="${i}" title="+${i} · id ${ids[i]}">${escapeHtml(showText(text))}</span>`;
    })
    .join('');
}

/** Both continuations side by side, from the first token where they differ marked. */
export function renderWhatIf(w: WhatIfBody | null | undefined): string {
  if (!w) {
    return '<div class="sl-empty">no what-if yet: pick a thread, a position and a replacement token</div>';
  }
  const where = w.diverge_at === null ? 'identical continuations' : `they diverge at +${w.diverge_at} (token ${w.position + w.diverge_at} of the stream)`;
  const n = w.shared_pages.length;
  const prefix =
    `${n} prefix page${n === 1 ? '' : 's'} shared by both forks` +
    (w.recomputed_prefix ? ' (prefix computed once from the recording)' : ' (forked from the run’s KV file)');
  const side = (name: 'original' | 'alternative') =>
    `<td class="sl-wi-${name}"><div class="sl-wi-name">${name} · ${w[name].length} token${w[name].length === 1 ? '' : 's'}</div>` +
    `<div class="sl-wi-text">${continuation(w.token_texts[name], w[name], w.diverge_at)}</div></td>`;
  return (
    `<div class="sl-wi" data-diverge="${w.diverge_at === null ? '' : w.diverge_at}">` +
    `<div class="sl-wi-head">thread ${w.pid}.${w.tid}, position ${w.position}: <b>${escapeHtml(where)}</b>; ${escapeHtml(prefix)}` +
    `${w.reproduces_recording ? ' · the original reproduces the recorded run' : ''}</div>` +
    `<table class="sl-wi-table"><tr>${side('original')}${side('alternative')}</tr></table></div>`
  );
}
