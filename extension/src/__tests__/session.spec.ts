import { SessionModel } from '../session';
import { distResult } from '../state';

const ev = (event: string, ts: number, body: any) => ({ type: 'event', event, ts, body });
const stop = (stop_id: number, pid: number, tid: number) => ({
  stop_id, pid, tid, reason: 'step', reasons: ['step'], where: 'after', call: 'pred', file: 'a.py', line: 3, seq: 2
});

describe('the sidebar folds the event stream (docs/protocol.md) as session_state.py does', () => {
  it('builds processes, threads and stops from events alone', () => {
    const m = new SessionModel();
    m.apply(ev('process_start', 1, { pid: 4, tid: 1, args: { name: 'beam' } }));
    m.apply(ev('thread_start', 2, { pid: 4, tid: 2, args: { name: 'beam-1' } }));
    m.apply(ev('stopped', 3, stop(7, 4, 2)));
    expect(m.processList().map(p => [p.pid, p.name, p.threads.map(t => t.tid)])).toEqual([[4, 'beam', [1, 2]]]);
    expect(m.stopList().map(s => s.stop_id)).toEqual([7]);
    expect(m.processes.get(4)!.threads[1].stopped?.stop_id).toBe(7);
    m.apply(ev('overridden', 4, { pid: 4, tid: 2, stop_id: 7, edit: { force: 9 }, result: { kind: 'dist', chosen: { token: 9 } } }));
    expect(distResult(m.stops.get(7)!.result)!.chosen.token).toBe(9);
    m.apply(ev('continued', 5, { pid: 4, tid: 2, stop_id: 7, action: 'step_over', stopped_for: 0.1 }));
    expect(m.stopList()).toEqual([]);
    m.apply(ev('thread_exit', 6, { pid: 4, tid: 2, error: null }));
    expect(m.processes.get(4)!.threads[1].state).toBe('finished');
    m.apply(ev('stopped', 7, stop(8, 4, 1)));
    m.apply(ev('process_exit', 8, { pid: 4, tid: 0, args: { status: 'cancelled' }, error: 'cancelled' }));
    const p = m.processes.get(4)!;
    expect([p.done, p.status, m.stopList().length]).toEqual([true, 'cancelled', 0]);
    expect(m.folded).toBe(8);
  });

  it('a snapshot older than an event never brings back a continued stop', () => {
    const m = new SessionModel();
    m.apply(ev('stopped', 10, stop(1, 2, 1)));
    m.apply(ev('continued', 12, { pid: 2, tid: 1, stop_id: 1, action: 'continue' }));
    // built at ts 11 (after the stop, before the continue) but delivered after both
    m.apply({ event: 'lab_view', body: { ts: 11, processes: [{ pid: 2, name: 'x', status: 'running', threads: [] }], stops: [stop(1, 2, 1)] } });
    expect(m.stopList()).toEqual([]);
    expect(m.processList()[0].threads.map(t => t.tid)).toEqual([]);
    // an event the snapshot already holds is not folded twice
    expect(m.apply(ev('process_start', 9, { pid: 3, tid: 1, args: { name: 'old' } }))).toBe(false);
    m.apply({ event: 'lab_view', body: { ts: 20, processes: [], stops: [], breakpoints: [{ id: 1, call: 'pred', hits: 0 }] } });
    expect([m.processList().length, m.breakpoints.length]).toEqual([0, 1]);
  });
});
