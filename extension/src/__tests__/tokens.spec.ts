import { escapeHtml, formatProb, probColor, renderTokens, renderTopK, showText, tokenTitle } from '../tokens';

describe('tokens', () => {
  it('escapes HTML in token text and titles', () => {
    expect(escapeHtml('<b a="1">&\'')).toBe('&lt;b a=&quot;1&quot;&gt;&amp;&#39;');
    const html = renderTokens([{ id: 1, text: '<script>', p: 0.5 }]);
    expect(html).not.toContain('<script>');
    expect(html).toContain('&lt;script&gt;');
  });

  it('colours by probability: red when unlikely, green when certain, grey when unknown', () => {
    expect(probColor(0)).toBe('hsl(0, 75%, 82%)');
    expect(probColor(1)).toBe('hsl(120, 75%, 82%)');
    expect(probColor(0.5)).toBe('hsl(60, 75%, 82%)');
    expect(probColor(2)).toBe('hsl(120, 75%, 82%)');
    expect(probColor(null)).toBe('hsl(0, 0%, 90%)');
    expect(probColor(NaN)).toBe('hsl(0, 0%, 90%)');
  });

  it('shows whitespace and empty tokens visibly', () => {
    expect(showText('a\nb\t')).toBe('a⏎b⇥');
    expect(showText('')).toBe('∅');
  });

  it('formats probabilities compactly', () => {
    expect(formatProb(0.9999)).toBe('1.00');
    expect(formatProb(0.5)).toBe('0.50');
    expect(formatProb(0.05)).toBe('0.050');
    expect(formatProb(0.0001)).toBe('1.0e-4');
    expect(formatProb(undefined)).toBe('–');
  });

  it('puts the top-k alternatives in the hover title and marks the chosen one', () => {
    const t = tokenTitle({ id: 7, text: ' Paris', p: 0.8, topk: [{ token: 7, text: ' Paris', p: 0.8 }, { token: 9, text: ' Lyon', p: 0.1 }] });
    expect(t.split('\n')).toHaveLength(3);
    expect(t).toContain('▸ " Paris"');
    expect(t).toContain('  " Lyon"  0.10');
  });

  it('marks overridden tokens and indexes every span', () => {
    const html = renderTokens([{ id: 1, text: 'a', p: 0.9 }, { id: 2, text: 'b', p: 0.01, overridden: true }]);
    expect(html.match(/class="sl-tok/g)).toHaveLength(2);
    expect(html).toContain('sl-tok sl-tok-override" data-index="1"');
  });

  it('offers "use" buttons for every top-k token except the chosen one', () => {
    const html = renderTopK([{ token: 1, text: 'a', p: 0.7 }, { token: 2, text: 'b', p: 0.2 }, { token: 3, text: 'c', p: 0.1 }], 1, true);
    expect(html.match(/sl-override-pick/g)).toHaveLength(2);
    expect(html).not.toContain('data-token="1"');
    expect(renderTopK([{ token: 1, text: 'a', p: 1 }], null, false)).not.toContain('button');
  });
});
