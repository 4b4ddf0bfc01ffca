/**
 * The LIP profiler's line table and the what-if explorer's side-by-side continuations, as HTML
 * strings (the run widget's Profile and What-if tabs and the sidebar draw them the same way).
 * The data is built once in Python (symphony_lab/profiler/view.py `profile_view`,
 * symphony_lab/whatif.py `WhatIf.view`): the rows come picked, sorted and in milliseconds.
 */

import { escapeHtml, showText } from './tokens';

export interface ProfileRow {
  pid: number;
  tid: number;
  file: string;
  where: string;
  line: number;
  function: string;
  text: string;
  ms: Record<string, number>;
  inclusive_ms: number;
  preds: number;
  tokens: number;
}

export interface ProfileThread {
  pid: number;
  tid: number;
  name: string;
  wall_ms: number;
  ms: Record<string, number>;
  preds: number;
  tokens: number;
}

export interface ProfileView {
  buckets: string[];
  colours: Record<string, string>;
  rows: ProfileRow[];
  more: number;
  threads: ProfileThread[];
}

export interface WhatIfToken {
  id: number;
  text: string;
}

export interface WhatIfView {
  tid?: number;
  position: number;
  diverge_at: number | null;
  original: WhatIfToken[];
  alternative: WhatIfToken[];
  recorded: WhatIfToken[];
  reproduces: boolean;
  shared_pages: number;
  prefix_pages: number;
  recomputed_prefix: boolean;
}

const ms = (x: number | undefined): string => (x ?? 0).toFixed(1);

/** The rows of one thread (`tid`), or of every thread (`null`). */
export function profileRows(v: ProfileView, tid: number | null): ProfileRow[] {
  return v.rows.filter(r => tid === null || r.tid === tid);
}

/** The line table: per line and thread, total ms, a stacked bar of the buckets, preds and tokens fed. */
export function renderProfileTable(v: ProfileView | null | undefined, tid: number | null = null, barWidth = 160): string {
  if (!v) {
    return '<div class="sl-empty">not profiled: launch with lab.run(..., profile=True)</div>';
  }
  const rows = profileRows(v, tid);
  if (!rows.length) {
    return '<div class="sl-empty">no profiled lines yet</div>';
  }
  const most = Math.max(...rows.map(r => r.ms.total ?? 0)) || 1;
  const legend = v.buckets.map(b => `<span class="sl-prof-key" style="color:${v.colours[b]}">■ ${escapeHtml(b)}</span>`).join(' ');
  const head =
    `<tr><th>line</th><th>thr</th><th>ms</th>` +
    v.buckets.map(b => `<th class="sl-prof-b">${escapeHtml(b)}</th>`).join('') +
    `<th>preds</th><th>tok</th><th>${legend}</th></tr>`;
  const body = rows
    .map(r => {
      const bar = v.buckets
        .map(b => {
          const w = (barWidth * (r.ms[b] ?? 0)) / most;
          return w >= 0.5 ? `<span title="${escapeHtml(b)} ${ms(r.ms[b])} ms" style="display:inline-block;height:10px;background:${v.colours[b]};width:${w.toFixed(1)}px"></span>` : '';
        })
        .join('');
      return (
        `<tr class="sl-prof-row" data-tid="${r.tid}" data-line="${r.line}">` +
        `<td title="${escapeHtml(r.file)}"><code>${escapeHtml(r.where)}</code> ${escapeHtml(r.function)}` +
        (r.text ? `<div class="sl-prof-src"><code>${escapeHtml(r.text)}</code></div>` : '') +
        `</td><td>${r.pid}.${r.tid}</td><td class="sl-prof-total">${ms(r.ms.total)}</td>` +
        v.buckets.map(b => `<td class="sl-prof-b">${ms(r.ms[b])}</td>`).join('') +
        `<td>${r.preds}</td><td>${r.tokens}</td><td class="sl-prof-bar">${bar}</td></tr>`
      );
    })
    .join('');
  const threads = v.threads
    .filter(t => tid === null || t.tid === tid)
    .map(
      t =>
        `<div class="sl-prof-thread">thread ${t.pid}.${t.tid} ${escapeHtml(t.name)}: wall ${ms(t.wall_ms)} ms = ` +
        v.buckets.map(b => `${escapeHtml(b)} ${ms(t.ms[b])}`).join(' + ') +
        ` · ${t.preds} preds, ${t.tokens} tokens fed</div>`
    )
    .join('');
  const more = v.more > 0 && tid === null ? `<div class="sl-note">${v.more} more line${v.more === 1 ? '' : 's'} not shown</div>` : '';
  return `<table class="sl-prof-table"><thead>${head}</thead><tbody>${body}</tbody></table>${more}${threads}`;
}

/** The threads of a profile, for a thread picker. */
export function profileThreads(v: ProfileView | null | undefined): number[] {
  return v ? Array.from(new Set(v.threads.map(t => t.tid).concat(v.rows.map(r => r.tid)))).sort((a, b) => a - b) : [];
}

function continuation(toks: WhatIfToken[], divergeAt: number | null): string {
  return toks
    .map((t, i) => {
      const cls = divergeAt === null ? 'sl-wi-same' : i < divergeAt ? 'sl-wi-same' : i === divergeAt ? 'sl-wi-diverge' : 'sl-wi-after';
      return `<span class="sl-wi-tok ${cls}" data-i="${i}" title="+${i} · id ${t.id}">${escapeHtml(showText(t.text))}</span>`;
    })
    .join('');
}

/** Both continuations side by side, from the first token where they differ marked. */
export function renderWhatIf(w: WhatIfView | null | undefined): string {
  if (!w) {
    return '<div class="sl-empty">no what-if yet: pick a thread, a position and a replacement token</div>';
  }
  const where = w.diverge_at === null ? 'identical continuations' : `they diverge at +${w.diverge_at} (token ${w.position + w.diverge_at} of the stream)`;
  const prefix =
    `${w.shared_pages} prefix page${w.shared_pages === 1 ? '' : 's'} shared by both forks` +
    (w.recomputed_prefix ? ' (prefix computed once from the recording)' : ' (forked from the run’s KV file)');
  const side = (name: string, toks: WhatIfToken[]) =>
    `<td class="sl-wi-${name}"><div class="sl-wi-name">${name} · ${toks.length} token${toks.length === 1 ? '' : 's'}</div>` +
    `<div class="sl-wi-text">${continuation(toks, w.diverge_at)}</div></td>`;
  return (
    `<div class="sl-wi" data-diverge="${w.diverge_at === null ? '' : w.diverge_at}">` +
    `<div class="sl-wi-head">${w.tid ? `thread ${w.tid}, ` : ''}position ${w.position}: <b>${escapeHtml(where)}</b>; ${escapeHtml(prefix)}` +
    `${w.reproduces ? ' · the original reproduces the recorded run' : ''}</div>` +
    `<table class="sl-wi-table"><tr>${side('original', w.original)}${side('alternative', w.alternative)}</tr></table></div>`
  );
}
