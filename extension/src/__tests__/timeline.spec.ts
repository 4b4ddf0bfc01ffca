import { batchTitle, BatchRec, membersByPid, mergeBatches, renderTimelineSvg } from '../timeline';

const b = (bid: number, pids: number[], t: number): BatchRec => ({
  bid,
  t_start: t,
  t_end: t + 0.01,
  members: pids.map((pid, i) => ({ pid, tid: 1 + i, file: pid * 10 + i, tokens: pid === 1 ? 5 : 1, kind: pid === 1 ? 'prefill' : 'decode' })),
  tokens: pids.length,
  queue_depth: pids.length + 1,
  pages_used: 3 * bid,
  pages_total: 100
});

describe('scheduler timeline', () => {
  it('merges incremental batch lists without duplicates and bounds the length', () => {
    const have = [b(1, [1], 0), b(2, [1], 1)];
    const merged = mergeBatches(have, [b(2, [1], 1), b(3, [2], 2)]);
    expect(merged.map(x => x.bid)).toEqual([1, 2, 3]);
    expect(mergeBatches(merged, [b(4, [1], 3), b(5, [1], 4)], 3).map(x => x.bid)).toEqual([3, 4, 5]);
  });

  it('groups members by process', () => {
    expect(membersByPid(b(1, [2, 1, 2], 0))).toEqual([
      [1, 1, 5],
      [2, 2, 2]
    ]);
  });

  it('lists every member in the batch tooltip', () => {
    const t = batchTitle(b(7, [1, 2], 0));
    expect(t).toContain('batch 7: 2 members');
    expect(t).toContain('pid 1.1 file #10 prefill 5 tok');
    expect(t).toContain('pid 2.2 file #21 decode 1 tok');
  });

  it('draws one bar group per batch, a segment per process, and the two counter lines', () => {
    const svg = renderTimelineSvg({ batches: [b(1, [1], 0), b(2, [1, 2], 1), b(3, [2, 3, 3], 2)], queue_depth: 0, pages_used: 9, pages_total: 100 });
    expect(svg.match(/class="sl-batch"/g)).toHaveLength(3);
    expect(svg.match(/<rect /g)).toHaveLength(1 + 2 + 2);
    expect(svg).toContain('sl-queue-line');
    expect(svg).toContain('sl-pages-line');
    expect(renderTimelineSvg({ batches: [], queue_depth: 0, pages_used: 0, pages_total: 1 })).toContain('no batches');
  });
});
