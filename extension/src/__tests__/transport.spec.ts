import { pageServer, WidgetTransport } from '../transport';

function fakeDoc(config: unknown, protocol = 'http:', host = 'h:8888'): any {
  return {
    location: { protocol, host },
    getElementById: (id: string) => (id === 'jupyter-config-data' && config !== null ? { textContent: JSON.stringify(config) } : null)
  };
}

describe('widget transport', () => {
  it('reads the Jupyter server from the page config', () => {
    expect(pageServer(fakeDoc({ baseUrl: '/user/a/', token: 'tk' }))).toEqual({ baseUrl: '/user/a/', wsUrl: 'ws://h:8888/user/a/', token: 'tk' });
    expect(pageServer(fakeDoc({ baseUrl: '/', wsUrl: 'wss://x/' }, 'https:'))!.wsUrl).toBe('wss://x/');
    expect(pageServer(fakeDoc({}, 'https:'))!.wsUrl).toBe('wss://h:8888/');
    expect(pageServer(fakeDoc(null))).toBeNull();
    expect(pageServer(undefined)).toBeNull();
  });

  it('falls back to the widget comm outside a Jupyter page and matches its responses', async () => {
    const handlers: Record<string, (m: any) => void> = {};
    const sent: any[] = [];
    const model = { send: (c: any) => sent.push(c), on: (n: string, cb: any) => (handlers[n] = cb), off: () => undefined };
    const kinds: string[] = [];
    const t = new WidgetTransport(model, 'kid', () => undefined, () => undefined, k => kinds.push(k));
    expect(t.kind).toBe('comm');
    expect(kinds).toEqual(['comm']);
    const p = t.request('step', { pid: 2, tid: 1 });
    expect(sent[0]).toMatchObject({ type: 'request', command: 'step', arguments: { pid: 2, tid: 1 } });
    handlers['msg:custom']({ type: 'response', request_seq: sent[0].seq, command: 'step', success: true, body: { ok: 1 } });
    await expect(p).resolves.toEqual({ ok: 1 });
    t.dispose();
  });
});
