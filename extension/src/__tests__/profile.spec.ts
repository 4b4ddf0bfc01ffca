import { profileThreads, ProfileBody, renderProfileTable, renderWhatIf } from '../profile';

const times = (t: Partial<Record<string, number>>) => ({
  queue: 0, forward: 0, own: 0, blocking: 0, kernel: 0, preds: 0, tokens: 0, syscalls: 0,
  ...t,
  total: ['queue', 'forward', 'own', 'blocking', 'kernel'].reduce((a, b) => a + (t[b] ?? 0), 0)
});

// a `profile` body (docs/protocol.md): seconds per bucket, the costliest lines first
const body: ProfileBody = {
  pid: 3, profiling: false, done: true, lines_total: 4,
  lines: [
    { pid: 3, tid: 2, file: '/x/a.py', line: 9, function: 'tool', inclusive: 0.1001, text: 'time.sleep(0.1)', ...times({ own: 0.0001, blocking: 0.1 }) },
    { pid: 3, tid: 1, file: '/x/a.py', line: 7, function: 'gen', inclusive: 0.0425, text: 'd = sym.pred(kv, [t])', ...times({ queue: 0.002, forward: 0.04, own: 0.0005, preds: 5, tokens: 5 }) }
  ],
  threads: [{ pid: 3, tid: 1, name: 'main', wall: 0.043, dropped: 0, ...times({ queue: 0.002, forward: 0.04, own: 0.0005, blocking: 0.0005, preds: 5, tokens: 5 }) }]
};

describe('the profiler line table and the what-if view', () => {
  it('draws one row per line and thread, in ms, with a bar scaled to the costliest line', () => {
    const html = renderProfileTable(body);
    expect(html.match(/class="sl-prof-row"/g)).toHaveLength(2);
    expect(html).toContain('<code>a.py:7</code> gen');
    expect(html).toContain('d = sym.pred(kv, [t])');
    expect(html).toContain('<td class="sl-prof-b">100.0</td>');
    expect(html).toContain('<td>5</td><td>5</td>'); // preds, tokens fed
    expect(html).toContain('width:159.8px'); // the costliest line's bar is 160 px: its blocking 100.0 of 100.1 ms
    expect(html).toContain('2 more lines not shown');
    expect(html).toContain('thread 3.1 main: wall 43.0 ms = queue 2.0 + forward 40.0');
    expect(renderProfileTable(body, 1).match(/class="sl-prof-row"/g)).toHaveLength(1);
    const compact = renderProfileTable(body, null, 90, true);
    expect(compact).not.toContain('class="sl-prof-b"');
    expect(compact).toContain('title="/x/a.py: queue 2.0, forward 40.0, own 0.5, blocking 0.0, kernel 0.0 ms"');
    expect(profileThreads(body)).toEqual([1, 2]);
    expect(renderProfileTable(null)).toContain('not profiled');
  });

  it("names a notebook cell's line by the cell, as the kernel sends it (`name`)", () => {
    const cell = { ...body, lines: [{ ...body.lines[1], file: '/tmp/ipykernel_71/2901.py', name: 'In[3]' }] };
    const html = renderProfileTable(cell);
    expect(html).toContain('<code>In[3]:7</code> gen');
    expect(html).not.toContain('2901.py:7');
  });

  it('puts both continuations side by side and marks where they diverge', () => {
    const html = renderWhatIf({
      pid: 4, tid: 1, position: 6, token: 1, original_token: 1, diverge_at: 1, reproduces_recording: true,
      shared_pages: [3], prefix_pages: 1, recomputed_prefix: false,
      original: [1, 2], alternative: [1, 3], token_texts: { original: [' Rome', ' is'], alternative: [' Rome', '<b>'] }
    });
    expect(html).toContain('thread 4.1, position 6: <b>they diverge at +1 (token 7 of the stream)</b>');
    expect(html).toContain('<td class="sl-wi-original">');
    expect(html).toContain('<td class="sl-wi-alternative">');
    expect(html.match(/sl-wi-diverge/g)).toHaveLength(2);
    expect(html).toContain('&lt;b&gt;');
    expect(html).toContain('1 prefix page shared');
    expect(renderWhatIf(null)).toContain('no what-if yet');
  });
});
