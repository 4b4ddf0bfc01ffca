import { KVTree, layoutTree, NODE_W, pageColor, parentMap, renderFileDetails, renderTreeSvg } from '../kvtree';

function file(fid: number, parent: number | null, pages: number[], shared: Record<number, number[]> = {}, ancestry?: number[]) {
  return {
    file: fid,
    path: null,
    parent,
    ancestry: ancestry ?? (parent === null ? [] : [parent]),
    length: pages.length * 4,
    n_pages: pages.length,
    shared_pages: pages.filter(p => shared[p]).length,
    pages: pages.map((p, i) => ({ index: i, page: p, slots: [i * 4, i * 4 + 4] as [number, number], refcount: shared[p] ? 2 : 1, shared_with: shared[p] ?? [], text: `p${p}` }))
  };
}

// root 1 forked into 2 and 3 (sharing page 10); 3 forked into 4; file 5 is a fork of a closed file 9 of 1
const tree: KVTree = {
  page_size: 4,
  pages_total: 64,
  pages_used: 7,
  files: [
    file(1, null, [10, 11], { 10: [2, 3] }),
    file(2, 1, [10, 12], { 10: [1, 3] }),
    file(3, 1, [10, 13], { 10: [1, 2] }, [1]),
    file(4, 3, [14], {}, [3, 1]),
    file(5, 9, [15], {}, [9, 1])
  ],
  edges: [[1, 2], [1, 3], [3, 4], [9, 5]],
  roots: [1],
  gone: [9],
  shared_pages: [10]
};

describe('KV fork tree', () => {
  it('finds parents through closed ancestors', () => {
    const p = parentMap(tree);
    expect(p.get(5)).toBe(9);
    expect(p.get(9)).toBe(1);
    expect(p.get(1)).toBeNull();
  });

  it('lays out a tidy tree: children below parents, parents centred, no overlaps', () => {
    const lay = layoutTree(tree);
    const at = new Map(lay.nodes.map(n => [n.fid, n]));
    expect(lay.nodes).toHaveLength(6);
    expect(at.get(9)!.gone).toBe(true);
    for (const e of lay.edges) {
      expect(at.get(e.to)!.depth).toBe(at.get(e.from)!.depth + 1);
    }
    // a parent sits between its first and last child
    const kids = [2, 3, 9].map(k => at.get(k)!.x);
    expect(at.get(1)!.x).toBeGreaterThanOrEqual(Math.min(...kids));
    expect(at.get(1)!.x).toBeLessThanOrEqual(Math.max(...kids));
    // nodes on one level never overlap
    const byDepth = new Map<number, number[]>();
    lay.nodes.forEach(n => byDepth.set(n.depth, [...(byDepth.get(n.depth) ?? []), n.x]));
    for (const xs of byDepth.values()) {
      xs.sort((a, b) => a - b);
      for (let i = 1; i < xs.length; i++) {
        expect(xs[i] - xs[i - 1]).toBeGreaterThanOrEqual(NODE_W);
      }
    }
    expect(lay.width).toBeGreaterThan(3 * NODE_W);
  });

  it('draws shared pages in the same colour in every file that holds them', () => {
    const svg = renderTreeSvg(tree);
    const shared = svg.match(/class="sl-page sl-shared" data-page="10"[^>]*fill="([^"]+)"/g) ?? [];
    expect(shared).toHaveLength(3);
    expect(new Set(shared.map(s => /fill="([^"]+)"/.exec(s)![1]))).toEqual(new Set([pageColor(10)]));
    expect(svg).toContain('stroke-dasharray'); // the closed file
    expect(svg.match(/class="sl-edge"/g)).toHaveLength(5);
  });

  it('highlights the selected file and shows its pages on click', () => {
    expect(renderTreeSvg(tree, 3)).toContain('sl-kvnode sl-selected" data-file="3"');
    const d = renderFileDetails(tree.files[2]);
    expect(d).toContain('file #3');
    expect(d).toContain('#1 #2');
    expect(d).toContain('p13');
    expect(renderFileDetails(undefined)).toContain('click a file');
  });

  it('handles an empty tree', () => {
    expect(renderTreeSvg({ ...tree, files: [], edges: [], roots: [], gone: [] })).toContain('no KV files');
  });
});
