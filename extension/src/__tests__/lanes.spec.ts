import { liveBreakpoints, splitThreads, describeStop, EVENT_NAMES } from '../state';
import { renderTimelineLegend, pidColor } from '../timeline';
import { renderLanes } from '../tokens';

describe('per-thread lanes, grouped threads, live breakpoints, process colours', () => {
  it('renders one lane per thread, never interleaved', () => {
    const html = renderLanes([
      { tid: 2, prompt: '', tokens: [{ token: 5, text: ' is', p: 0.9 }, { token: 6, text: ' to', p: 0.2, overridden: true }] },
      { tid: 3, prompt: '', tokens: [{ token: 7, text: ' imm', p: 0.5, pending: true }, { token: null, text: 'fed', fed: true }] }
    ]);
    const lanes = html.split('<div class="sl-lane"').slice(1);
    expect(lanes).toHaveLength(2);
    expect(lanes[0]).toContain('data-tid="2"');
    expect(lanes[0]).toContain(' is');
    expect(lanes[0]).not.toContain(' imm');
    expect(lanes[0]).toContain('sl-tok-override');
    expect(lanes[1]).toContain('sl-tok-pending');
    expect(lanes[1]).toContain('sl-tok-fed');
  });

  it('drops breakpoints bound to an ended process', () => {
    const procs: any[] = [
      { pid: 1, name: 'a', status: 'finished', done: true, threads: [] },
      { pid: 2, name: 'b', status: 'running', threads: [] }
    ];
    const bps: any[] = [{ id: 1, call: 'pred', pid: 1, hits: 0 }, { id: 2, call: 'pred', pid: 2, hits: 0 }, { id: 3, call: 'kv_close', hits: 1 }];
    expect(liveBreakpoints(bps, procs).map(b => b.id)).toEqual([2, 3]);
  });

  it('splits a process into live and finished threads (a stopped one is live)', () => {
    const p: any = {
      pid: 4, name: 'beam', status: 'running',
      threads: [
        { tid: 1, name: 'main', state: 'in_syscall', call: 'join', preds: 1 },
        { tid: 2, name: 'b', state: 'finished', call: null, preds: 3 },
        { tid: 3, name: 'b', state: 'stopped', call: 'pred', preds: 2 }
      ]
    };
    const stops: any[] = [{ stop_id: 9, pid: 4, tid: 3, reason: 'step', where: 'after', call: 'pred', file: null, line: null }];
    const { live, finished } = splitThreads(p, stops);
    expect(live.map(t => t.tid)).toEqual([1, 3]);
    expect(finished.map(t => t.tid)).toEqual([2]);
  });

  it('says a follow stop is a step into a thread, not a breakpoint', () => {
    const s: any = { stop_id: 1, pid: 1, tid: 2, reason: 'step', reasons: ['step', 'follow'], where: 'after', call: 'pred', file: null, line: null };
    expect(describeStop(s)).toContain('(step into thread)');
    expect(EVENT_NAMES).toContain('taken');
  });

  it('maps timeline colours to processes in the legend', () => {
    const tl: any = {
      batches: [{ bid: 1, t_start: 0, t_end: 1, members: [{ pid: 3, tid: 1, file: 1, tokens: 1, kind: 'd' }, { pid: 5, tid: 2, file: 2, tokens: 1, kind: 'd' }], tokens: 2, queue_depth: 0, pages_used: 1, pages_total: 8 }],
      queue: [], queue_depth: 0, pages_used: 1, pages_total: 8
    };
    const html = renderTimelineLegend(tl);
    expect(html).toContain(`style="color:${pidColor(3)}">■ pid 3`);
    expect(html).toContain(`style="color:${pidColor(5)}">■ pid 5`);
  });
});
