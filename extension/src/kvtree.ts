/**
 * The KV fork tree drawn as a graph: files are nodes, forks are edges, each node shows its
 * pages as small squares, and a page shared with another file gets that page's colour in
 * both places (so shared prefixes are visible at a glance). Files that have been closed but
 * are ancestors of live ones appear dashed. Pure functions over the debugger's `kv_tree`
 * snapshot, returning SVG/HTML strings.
 */

import type * as P from './generated/protocol';
import { escapeHtml, showText } from './tokens';

// What the tree drawing reads of the protocol's KV views: picked from the generated types, so a
// field renamed in the Python schema fails to compile here.
export type KVPage = Pick<P.KVPage, 'index' | 'page' | 'slots' | 'refcount' | 'shared_with'> &
  Partial<Pick<P.KVPage, 'swapped' | 'tokens' | 'text'>>;

export type KVFileView = Pick<P.KVFileView, 'file' | 'path' | 'parent' | 'length' | 'n_pages' | 'shared_pages'> &
  Partial<Pick<P.KVFileView, 'owner' | 'ancestry' | 'children' | 'held_by'>> & { pages: KVPage[] };

export type KVTree = Omit<P.KVTree, 'files' | 'edges'> & {
  files: KVFileView[];
  edges: Array<[number | null, number]>;
};

export interface LayoutNode {
  fid: number;
  x: number;
  y: number;
  depth: number;
  gone: boolean;
  file?: KVFileView;
}

export interface Layout {
  nodes: LayoutNode[];
  edges: Array<{ from: number; to: number }>;
  width: number;
  height: number;
}

export const NODE_W = 132;
export const NODE_H = 50;
const GAP_X = 16;
const GAP_Y = 28;
const MAX_PAGES_DRAWN = 12;

/** The parent of every node, live or gone (a gone file's parent is the next one in ancestry). */
export function parentMap(tree: KVTree): Map<number, number | null> {
  const parent = new Map<number, number | null>();
  for (const f of tree.files) {
    parent.set(f.file, f.parent ?? null);
    const chain = f.ancestry ?? [];
    for (let i = 0; i < chain.length; i++) {
      if (!parent.has(chain[i])) {
        parent.set(chain[i], i + 1 < chain.length ? chain[i + 1] : null);
      }
    }
  }
  // a parent not known at all (closed and not in anyone's ancestry) makes its child a root
  for (const [k, v] of parent) {
    if (v !== null && !parent.has(v)) {
      parent.set(k, null);
    }
  }
  return parent;
}

/** A tidy layered layout: leaves get consecutive columns, a parent sits over its children. */
export function layoutTree(tree: KVTree): Layout {
  const parent = parentMap(tree);
  const live = new Map(tree.files.map(f => [f.file, f] as [number, KVFileView]));
  const children = new Map<number, number[]>();
  const roots: number[] = [];
  for (const [fid, p] of parent) {
    if (p === null) {
      roots.push(fid);
    } else {
      children.set(p, [...(children.get(p) ?? []), fid]);
    }
  }
  roots.sort((a, b) => a - b);
  for (const c of children.values()) {
    c.sort((a, b) => a - b);
  }
  const nodes: LayoutNode[] = [];
  const edges: Array<{ from: number; to: number }> = [];
  let column = 0;
  let maxDepth = 0;
  const seen = new Set<number>();
  const place = (fid: number, depth: number): number => {
    seen.add(fid);
    maxDepth = Math.max(maxDepth, depth);
    const kids = (children.get(fid) ?? []).filter(k => !seen.has(k));
    let x: number;
    if (kids.length === 0) {
      x = column++;
    } else {
      const xs = kids.map(k => {
        edges.push({ from: fid, to: k });
        return place(k, depth + 1);
      });
      x = (xs[0] + xs[xs.length - 1]) / 2;
    }
    nodes.push({ fid, x, y: depth, depth, gone: !live.has(fid), file: live.get(fid) });
    return x;
  };
  for (const r of roots) {
    place(r, 0);
  }
  for (const n of nodes) {
    n.x = 8 + n.x * (NODE_W + GAP_X);
    n.y = 8 + n.y * (NODE_H + GAP_Y);
  }
  nodes.sort((a, b) => a.fid - b.fid);
  return {
    nodes,
    edges,
    width: 16 + Math.max(1, column) * (NODE_W + GAP_X) - GAP_X,
    height: 16 + (maxDepth + 1) * (NODE_H + GAP_Y) - GAP_Y
  };
}

/** A stable colour per physical page id, so a shared page looks the same in every file. */
export function pageColor(page: number): string {
  const hue = (page * 137.508) % 360;
  return `hsl(${Math.round(hue)}, 65%, 55%)`;
}

export function renderTreeSvg(tree: KVTree, selected: number | null = null): string {
  const lay = layoutTree(tree);
  if (lay.nodes.length === 0) {
    return '<div class="sl-empty">no KV files</div>';
  }
  const pos = new Map(lay.nodes.map(n => [n.fid, n] as [number, LayoutNode]));
  const parts: string[] = [];
  parts.push(
    `<svg class="sl-kvtree" xmlns="http://www.w3.org/2000/svg" width="${lay.width}" height="${lay.height}" viewBox="0 0 ${lay.width} ${lay.height}">`
  );
  for (const e of lay.edges) {
    const a = pos.get(e.from)!;
    const b = pos.get(e.to)!;
    const x1 = a.x + NODE_W / 2;
    const y1 = a.y + NODE_H;
    const x2 = b.x + NODE_W / 2;
    const y2 = b.y;
    const my = (y1 + y2) / 2;
    parts.push(
      `<path class="sl-edge" data-from="${e.from}" data-to="${e.to}" d="M${x1},${y1} C${x1},${my} ${x2},${my} ${x2},${y2}" fill="none" stroke="#888" stroke-width="1.5"/>`
    );
  }
  for (const n of lay.nodes) {
    const f = n.file;
    const cls = `sl-kvnode${n.gone ? ' sl-gone' : ''}${selected === n.fid ? ' sl-selected' : ''}`;
    const title = f
      ? `file ${f.file}${f.path ? ' ' + f.path : ''}: ${f.length} tokens, ${f.n_pages} pages, ${f.shared_pages} shared` +
        (f.held_by && f.held_by.length ? `, held by pid ${f.held_by.join(', ')}` : '')
      : `file ${n.fid} (closed)`;
    parts.push(`<g class="${cls}" data-file="${n.fid}" transform="translate(${n.x},${n.y})">`);
    parts.push(`<title>${escapeHtml(title)}</title>`);
    parts.push(
      `<rect width="${NODE_W}" height="${NODE_H}" rx="6" fill="${n.gone ? 'none' : 'var(--sl-node-bg, #f4f6fb)'}" stroke="${
        selected === n.fid ? '#e67e22' : '#5b6b8c'
      }" stroke-width="${selected === n.fid ? 2.5 : 1}"${n.gone ? ' stroke-dasharray="4 3"' : ''}/>`
    );
    const label = f ? `#${f.file}${f.path ? ' ' + f.path.split('/').pop() : ''} · ${f.length} tok` : `#${n.fid} closed`;
    parts.push(`<text x="6" y="15" font-size="11" font-family="monospace" fill="currentColor">${escapeHtml(label)}</text>`);
    if (f) {
      const drawn = f.pages.slice(0, MAX_PAGES_DRAWN);
      drawn.forEach((pg, i) => {
        const shared = pg.shared_with.length > 0;
        const full = Math.max(0, Math.min(1, (pg.slots[1] - pg.slots[0]) / Math.max(1, tree.page_size)));
        parts.push(
          `<rect class="sl-page${shared ? ' sl-shared' : ''}" data-page="${pg.page}" x="${6 + i * 10}" y="24" width="8" height="16" ` +
            `fill="${shared ? pageColor(pg.page) : '#b9c3d6'}" fill-opacity="${0.35 + 0.65 * full}" stroke="${shared ? '#222' : 'none'}" stroke-width="${shared ? 1 : 0}">` +
            `<title>page ${pg.page} (slots ${pg.slots[0]}–${pg.slots[1]}, refs ${pg.refcount}${shared ? ', shared with #' + pg.shared_with.join(', #') : ''})</title></rect>`
        );
      });
      if (f.pages.length > MAX_PAGES_DRAWN) {
        parts.push(`<text x="${8 + MAX_PAGES_DRAWN * 10}" y="37" font-size="10" fill="currentColor">+${f.pages.length - MAX_PAGES_DRAWN}</text>`);
      }
    }
    parts.push('</g>');
  }
  parts.push('</svg>');
  return parts.join('');
}

/** What a click on a node shows: the file's pages with their token text and sharing. */
export function renderFileDetails(f: KVFileView | undefined): string {
  if (!f) {
    return '<div class="sl-empty">click a file to see its pages</div>';
  }
  const rows = f.pages
    .map(
      pg =>
        `<tr><td>${pg.index}</td><td>${pg.page}</td><td>${pg.slots[0]}–${pg.slots[1]}</td><td>${pg.refcount}</td>` +
        `<td>${pg.shared_with.length ? pg.shared_with.map(x => '#' + x).join(' ') : ''}</td>` +
        `<td><code>${escapeHtml(showText(pg.text ?? ''))}</code></td></tr>`
    )
    .join('');
  return (
    `<div class="sl-kvfile"><b>file #${f.file}</b>${f.path ? ' <code>' + escapeHtml(f.path) + '</code>' : ''} · ${f.length} tokens · ` +
    `${f.n_pages} pages (${f.shared_pages} shared)` +
    (f.ancestry && f.ancestry.length ? ` · forked from ${f.ancestry.map(a => '#' + a).join(' ← ')}` : '') +
    `<table class="sl-pages"><thead><tr><th>#</th><th>page</th><th>slots</th><th>refs</th><th>shared with</th><th>text</th></tr></thead><tbody>${rows}</tbody></table></div>`
  );
}
