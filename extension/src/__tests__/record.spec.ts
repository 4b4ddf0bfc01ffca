import { recordInfo } from '../widget/record';

describe('record / replay indicator', () => {
  it('offers Record on a live run that is not recorded, and no step back', () => {
    const r = recordInfo(undefined, true, true);
    expect(r.state).toBe('off');
    expect(r.canRecord).toBe(true);
    expect(r.canStepBack).toBe(false);
    expect(r.title).toContain('Record');
    expect(recordInfo(null, false, false).canRecord).toBe(false);
  });

  it('shows a recording from the start, and lets the server decide step back', () => {
    const v = { recorded: true, recording: true, complete: true, preds: 2, replay_of: null, diverged: 0, can_step_back: true };
    const r = recordInfo(v, true, false);
    expect(r.state).toBe('recording');
    expect(r.label).toBe('● rec · 2 preds');
    expect(r.canRecord).toBe(false);
    expect(r.canStepBack).toBe(true);
    expect(recordInfo({ ...v, recording: false, preds: 1 }, false, false).label).toBe('○ rec · 1 pred');
  });

  it('marks a recording begun mid-run as partial', () => {
    const r = recordInfo({ recorded: true, recording: true, complete: false, preds: 3 }, true, false);
    expect(r.state).toBe('partial');
    expect(r.title).toContain('cannot be replayed');
  });

  it('names the source of a replay and a divergence', () => {
    const r = recordInfo({ recorded: true, recording: true, complete: true, preds: 1, replay_of: 4, diverged: 1, can_step_back: true }, true, false);
    expect(r.state).toBe('replay');
    expect(r.label).toBe('⟲ replay of pid 4 · diverged');
    expect(r.title).toContain('1 pred so far');
    expect(r.canStepBack).toBe(true);
  });
});
