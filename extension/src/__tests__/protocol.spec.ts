import { AnyCommand, ArgsOf, checkIncoming, labSocketUrl, makeRequest, Requester } from '../protocol';
import { describeStop, primaryStop, StopView, stopDist, threadActions } from '../state';

describe('protocol', () => {
  it('checks what the server sends', () => {
    expect(checkIncoming('{').ok).toBe(false);
    expect(checkIncoming('[1]')).toEqual({ ok: false, error: 'expected a JSON object' });
    expect(checkIncoming({ type: 'response' })).toEqual({ ok: false, error: "a response needs a boolean 'success'" });
    expect(checkIncoming({ type: 'nope' }).ok).toBe(false);
    expect(checkIncoming({ type: 'event', event: 'stopped', body: {} }).ok).toBe(true);
  });

  it('refuses to build malformed requests', () => {
    // what an untyped (JavaScript) caller could send: the runtime checks still refuse it
    expect(() => makeRequest(1, 'Step!' as AnyCommand)).toThrow('bad command name');
    expect(() => makeRequest(1, 'step', { pid: '3' } as unknown as ArgsOf<'step'>)).toThrow("'pid' must be an integer");
    expect(makeRequest(4, 'step', { pid: 3, tid: 1 })).toEqual({ type: 'request', seq: 4, command: 'step', arguments: { pid: 3, tid: 1 } });
  });

  it('matches responses to requests by seq and routes events and errors', async () => {
    const sent: any[] = [];
    const events: any[] = [];
    const errors: string[] = [];
    const r = new Requester(q => sent.push(q), e => events.push(e), t => errors.push(t), 0);
    const a = r.request('step', { pid: 1 });
    const b = r.request('continue', { pid: 1 });
    expect(r.inFlight).toBe(2);
    r.receive(JSON.stringify({ type: 'response', request_seq: sent[1].seq, command: 'continue', success: false, message: 'no stopped thread' }));
    r.receive({ type: 'event', event: 'stopped', body: { pid: 1 } });
    r.receive({ type: 'response', request_seq: sent[0].seq, command: 'step', success: true, body: { resumed: [[1, 1]] } });
    r.receive('garbage');
    r.receive({ type: 'error', message: 'malformed message: missing command' });
    await expect(a).resolves.toEqual({ resumed: [[1, 1]] });
    await expect(b).rejects.toThrow('no stopped thread');
    expect(events).toHaveLength(1);
    expect(errors[0]).toContain('bad message from server');
    expect(errors[1]).toContain('malformed message');
    expect(r.inFlight).toBe(0);
  });

  it('times out and fails pending requests', async () => {
    jest.useFakeTimers();
    const r = new Requester(() => undefined, undefined, undefined, 1000);
    const p = r.request('threads');
    jest.advanceTimersByTime(1001);
    await expect(p).rejects.toThrow('no answer in 1s');
    const q = r.request('threads');
    r.failAll('closed');
    await expect(q).rejects.toThrow('closed');
    jest.useRealTimers();
  });

  it('builds the kernel socket URL', () => {
    expect(labSocketUrl('ws://h:8888/base', 'abc-1', 't k')).toBe('ws://h:8888/base/symphony-lab/api/kernels/abc-1/ws?token=t%20k');
    expect(labSocketUrl('ws://h/', 'k')).toBe('ws://h/symphony-lab/api/kernels/k/ws');
  });
});

describe('thread state', () => {
  const t = (state: string, stopped: any = null) => ({ tid: 1, name: 'main', state, call: null, preds: 0, stopped });
  const stop = (where: StopView['where'], call: string | null, result: any = null): StopView => ({ stop_id: 5, pid: 2, tid: 1, reason: 'step', where, call, file: '/x/beam.py', line: 57, result });

  it('offers step/continue only when stopped, pause only when running', () => {
    expect(threadActions(t('running'))).toEqual({ step: false, continue: false, pause: true, override: false });
    expect(threadActions(t('finished'))).toEqual({ step: false, continue: false, pause: false, override: false });
    expect(threadActions(undefined).step).toBe(false);
    const s = stop('after', 'pred', { kind: 'dist' });
    expect(threadActions(t('stopped', s), s)).toEqual({ step: true, continue: true, pause: false, override: true });
    const e = stop('entry', null);
    expect(threadActions(t('stopped', e), e).override).toBe(false);
    const before = stop('before', 'pred');
    expect(threadActions(t('stopped', before), before).override).toBe(true);
  });

  it('describes stops and picks the primary one', () => {
    expect(describeStop(stop('after', 'pred'))).toBe('thread 2.1 stopped after pred (step) at beam.py:57');
    expect(describeStop(stop('entry', null))).toContain('on entry');
    const s1 = { ...stop('after', 'pred'), tid: 3, stop_id: 9 };
    const s2 = { ...stop('after', 'pred'), tid: 1, stop_id: 10 };
    expect(primaryStop([s1, s2], 2)!.tid).toBe(1);
    expect(primaryStop([s1], 7)).toBeNull();
    expect(stopDist(stop('after', 'pred', { kind: 'dist', chosen: { token: 1 }, topk: [1] }))!.topk).toEqual([1]);
    expect(stopDist(stop('entry', null))).toBeNull();
  });
});
