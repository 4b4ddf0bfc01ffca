/**
 * The token stream: each generated token coloured by the probability the model gave it,
 * with the top-k alternatives in its tooltip. Pure functions returning HTML strings, so the
 * notebook widget and the sidebar render the same way and Jest can test them without a DOM.
 */

export interface TopK {
  token: number;
  text: string;
  p: number;
}

export interface TokenView {
  id: number;
  text: string;
  p?: number | null;
  topk?: TopK[];
  overridden?: boolean;
  step?: number;
}

/** Escape text for HTML element content and attribute values. */
export function escapeHtml(s: unknown): string {
  return String(s ?? '')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

/** A background colour for probability `p`: red (unlikely) through yellow to green (certain). */
export function probColor(p: number | null | undefined): string {
  if (p === null || p === undefined || !isFinite(p)) {
    return 'hsl(0, 0%, 90%)';
  }
  const q = Math.min(1, Math.max(0, p));
  const hue = Math.round(120 * q);
  return `hsl(${hue}, 75%, 82%)`;
}

/** A visible form of a token's text: spaces and newlines shown, empty text marked. */
export function showText(text: string): string {
  if (text === '') {
    return '∅';
  }
  return text.replace(/\n/g, '⏎').replace(/\t/g, '⇥');
}

export function formatProb(p: number | null | undefined): string {
  if (p === null || p === undefined || !isFinite(p)) {
    return '–';
  }
  if (p >= 0.995) {
    return '1.00';
  }
  if (p < 0.001) {
    return p.toExponential(1);
  }
  return p.toFixed(p < 0.1 ? 3 : 2);
}

/** The hover text of one token: its probability and the top-k alternatives. */
export function tokenTitle(t: TokenView): string {
  const lines = [`#${t.id} ${JSON.stringify(t.text)}  p=${formatProb(t.p)}${t.overridden ? '  (override)' : ''}`];
  for (const k of t.topk ?? []) {
    lines.push(`${k.token === t.id ? '▸' : ' '} ${JSON.stringify(k.text)}  ${formatProb(k.p)}`);
  }
  return lines.join('\n');
}

/** The token stream as HTML spans (`data-index` lets a click find the token). */
export function renderTokens(tokens: TokenView[]): string {
  return tokens
    .map(
      (t, i) =>
        `<span class="sl-tok${t.overridden ? ' sl-tok-override' : ''}" data-index="${i}" ` +
        `style="background:${probColor(t.p)}" title="${escapeHtml(tokenTitle(t))}">${escapeHtml(showText(t.text))}</span>`
    )
    .join('');
}

/** The top-k table at a stop; each row is a button that overrides the chosen token. */
export function renderTopK(topk: TopK[], chosen: number | null, canOverride: boolean): string {
  const rows = topk
    .map(k => {
      const w = Math.max(1, Math.round(100 * Math.min(1, k.p)));
      return (
        `<tr class="sl-topk-row${k.token === chosen ? ' sl-chosen' : ''}">` +
        `<td><code>${escapeHtml(showText(k.text))}</code></td>` +
        `<td class="sl-num">${k.token}</td>` +
        `<td><div class="sl-bar" style="width:${w}%;background:${probColor(k.p)}"></div>${formatProb(k.p)}</td>` +
        `<td>${canOverride && k.token !== chosen ? `<button class="sl-override-pick" data-token="${k.token}">use</button>` : ''}</td>` +
        `</tr>`
      );
    })
    .join('');
  return `<table class="sl-topk"><thead><tr><th>token</th><th>id</th><th>p</th><th></th></tr></thead><tbody>${rows}</tbody></table>`;
}

/** One token of a thread's lane (symphony_lab/session_state.py `SessionState.lane`). */
export interface LaneToken {
  token: number | null;
  text: string;
  p?: number | null;
  overridden?: boolean;
  pending?: boolean;
  fed?: boolean;
}

export interface Lane {
  tid: number;
  prompt: string;
  tokens: LaneToken[];
}

/** One row per thread: its tokens coloured by probability (fed text dim), never interleaved. */
export function renderLanes(lanes: Lane[]): string {
  return lanes
    .map(lane => {
      const toks = lane.tokens
        .map(t =>
          t.fed || t.token === null
            ? `<span class="sl-tok-fed">${escapeHtml(showText(t.text))}</span>`
            : `<span class="sl-tok${t.overridden ? ' sl-tok-override' : ''}${t.pending ? ' sl-tok-pending' : ''}" ` +
              `style="background:${probColor(t.p)}" title="${escapeHtml(`#${t.token} ${JSON.stringify(t.text)}  p=${formatProb(t.p)}${t.overridden ? '  (override)' : ''}`)}">${escapeHtml(showText(t.text))}</span>`
        )
        .join('');
      return `<div class="sl-lane" data-tid="${lane.tid}"><span class="sl-lane-tid">t${lane.tid}</span>${toks || '<span class="sl-empty">no tokens yet</span>'}</div>`;
    })
    .join('');
}
