import { profileThreads, renderProfileTable, renderWhatIf } from '../profile';

const view = {
  buckets: ['queue', 'forward', 'own', 'blocking', 'kernel'],
  colours: { queue: '#f2b134', forward: '#4a90d9', own: '#5cb85c', blocking: '#d9534f', kernel: '#999' },
  rows: [
    { pid: 3, tid: 1, file: '/x/a.py', where: 'a.py:7', line: 7, function: 'gen', text: 'd = sym.pred(kv, [t])',
      ms: { queue: 2, forward: 40, own: 0.5, blocking: 0, kernel: 0, total: 42.5 }, inclusive_ms: 42.5, preds: 5, tokens: 5 },
    { pid: 3, tid: 2, file: '/x/a.py', where: 'a.py:9', line: 9, function: 'tool', text: 'time.sleep(0.1)',
      ms: { queue: 0, forward: 0, own: 0.1, blocking: 100, kernel: 0, total: 100.1 }, inclusive_ms: 100.1, preds: 0, tokens: 0 }
  ],
  more: 2,
  threads: [{ pid: 3, tid: 1, name: 'main', wall_ms: 43, ms: { queue: 2, forward: 40, own: 0.5, blocking: 0.5, kernel: 0, total: 43 }, preds: 5, tokens: 5 }]
};

describe('the profiler line table and the what-if view', () => {
  it('draws one row per line and thread, with each bucket and a bar scaled to the costliest line', () => {
    const html = renderProfileTable(view);
    expect(html.match(/class="sl-prof-row"/g)).toHaveLength(2);
    expect(html).toContain('a.py:7');
    expect(html).toContain('d = sym.pred(kv, [t])');
    expect(html).toContain('<td class="sl-prof-b">100.0</td>');
    expect(html).toContain('width:159.8px'); // the costliest line's bar is 160 px: its blocking 100.0 of 100.1 ms
    expect(html).toContain('2 more lines not shown');
    expect(html).toContain('thread 3.1 main: wall 43.0 ms');
    expect(renderProfileTable(view, 1).match(/class="sl-prof-row"/g)).toHaveLength(1);
    expect(profileThreads(view)).toEqual([1, 2]);
    expect(renderProfileTable(null)).toContain('not profiled');
  });

  it('puts both continuations side by side and marks where they diverge', () => {
    const html = renderWhatIf({
      tid: 1, position: 6, diverge_at: 1, reproduces: true, shared_pages: 1, prefix_pages: 1, recomputed_prefix: false,
      original: [{ id: 1, text: ' Rome' }, { id: 2, text: ' is' }], alternative: [{ id: 1, text: ' Rome' }, { id: 3, text: '<b>' }], recorded: []
    });
    expect(html).toContain('they diverge at +1 (token 7 of the stream)');
    expect(html).toContain('<td class="sl-wi-original">');
    expect(html).toContain('<td class="sl-wi-alternative">');
    expect(html.match(/sl-wi-diverge/g)).toHaveLength(2);
    expect(html).toContain('&lt;b&gt;');
    expect(html).toContain('1 prefix page shared');
    expect(renderWhatIf(null)).toContain('no what-if yet');
  });
});
