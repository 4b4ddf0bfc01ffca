/**
 * The run widget's Profile and What-if tabs: the profiler's line table of a `profile=True` run
 * (the protocol's `profile` body in the run's view) with a thread picker, and the what-if form
 * (a recorded thread, a position, a replacement token) sending the protocol's `what_if`, with the
 * last answer's two continuations side by side (profile.ts draws both).
 */

import { profileThreads, renderProfileTable, renderWhatIf } from '../profile';
import type { AnyCommand, ArgsOf } from '../protocol';
import { escapeHtml } from '../tokens';
import { button, h } from './dom';

export interface PanelHost {
  request<C extends AnyCommand>(command: C, args: ArgsOf<C>): Promise<void>;
  error(text: string): void;
  pid(): number | null;
  refresh(): void;
}

const RUNNING = 'running both continuations…';

function fillSelect(sel: HTMLSelectElement, options: Array<[string, string]>): void {
  const html = options.map(([value, label]) => `<option value="${escapeHtml(value)}">${escapeHtml(label)}</option>`).join('');
  if (sel.dataset.options !== html) {
    const keep = sel.value;
    sel.innerHTML = html;
    sel.dataset.options = html;
    if (options.some(([value]) => value === keep)) {
      sel.value = keep;
    }
  }
}

function input(cls: string, type = 'text'): HTMLInputElement {
  const e = document.createElement('input');
  e.type = type;
  e.className = cls;
  return e;
}

function labelled(text: string, el: HTMLElement): HTMLElement {
  const l = h('label', '');
  l.append(document.createTextNode(text), el);
  return l;
}

export class AnalysisPanels {
  readonly profile = h('div', 'sl-panel sl-panel-profile');
  readonly whatIf = h('div', 'sl-panel sl-panel-whatif');
  private profThread = document.createElement('select');
  private profNote = h('span', 'sl-note');
  private profBox = h('div', 'sl-prof');
  private wiThread = document.createElement('select');
  private wiPos = input('sl-wi-pos', 'number');
  private wiText = input('sl-wi-token');
  private wiMax = input('sl-wi-max', 'number');
  private bRun = button('Run what-if', 'sl-wi-run', 'decode the alternative in a KV fork beside the original (the prefix pages are shared)');
  private wiNote = h('span', 'sl-note sl-wi-note');
  private wiBox = h('div', 'sl-wi-result');

  constructor(private host: PanelHost) {
    this.profThread.className = 'sl-prof-thread-pick';
    this.wiThread.className = 'sl-wi-thread';
    this.wiPos.min = '1';
    this.wiText.placeholder = 'one token, e.g. " Rome"';
    this.wiMax.min = '1';
    this.wiMax.max = '256';
    this.wiMax.value = '12';
    const bar = h('div', 'sl-prof-controls');
    bar.append(document.createTextNode('thread '), this.profThread, this.profNote);
    this.profile.append(bar, this.profBox);
    const form = h('div', 'sl-wi-form');
    form.append(
      labelled('thread ', this.wiThread),
      labelled(' position ', this.wiPos),
      labelled(' token ', this.wiText),
      labelled(' max ', this.wiMax),
      this.bRun,
      this.wiNote
    );
    this.whatIf.append(form, this.wiBox);
    this.profThread.onchange = () => host.refresh();
    this.bRun.onclick = () => void this.run();
  }

  private async run(): Promise<void> {
    const text = this.wiText.value;
    const position = Number(this.wiPos.value);
    if (!text) {
      this.host.error('what-if: type the replacement token first (one token, e.g. " Rome")');
      return;
    }
    if (!Number.isInteger(position) || position < 1) {
      this.host.error('what-if: the position must be a whole number >= 1');
      return;
    }
    const pid = this.host.pid();
    if (pid === null) {
      this.host.error('what-if: this widget has no process yet');
      return;
    }
    this.wiNote.textContent = RUNNING;
    const args = { pid, tid: Number(this.wiThread.value || 1), position, text, max_tokens: Number(this.wiMax.value) || 12 };
    await this.host.request('what_if', args);
    this.wiNote.textContent = '';
  }

  /** Redraw from the run's view; `tab` is the one on show (the hidden ones only keep their pickers). */
  update(v: any, tab: string, busy: boolean): void {
    const p = v.profile ?? null;
    if (tab === 'profile') {
      fillSelect(this.profThread, [['', 'all'], ...profileThreads(p).map(t => [String(t), `t${t}`] as [string, string])]);
      const tid = this.profThread.value === '' ? null : Number(this.profThread.value);
      this.profNote.textContent = p ? (p.done ? ' the whole run' : ' so far (refreshed every second)') : '';
      this.profBox.innerHTML = renderProfileTable(p, tid);
    }
    const threads: Array<{ tid: number; tokens: number; prompt: number }> = v.what_if_threads ?? [];
    fillSelect(this.wiThread, threads.map(t => [String(t.tid), `t${t.tid} (${t.tokens} tokens)`] as [string, string]));
    const t = threads.find(x => String(x.tid) === this.wiThread.value) ?? threads[0];
    if (t) {
      this.wiPos.max = String(t.tokens - 1);
      if (!this.wiPos.value) {
        this.wiPos.value = String(Math.min(t.prompt, t.tokens - 1)); // the first generated token
      }
      this.wiPos.title = `a position in [1, ${t.tokens - 1}]: the prompt is tokens 0..${t.prompt - 1}, the first generated token is ${t.prompt}`;
    }
    this.bRun.disabled = busy || !threads.length;
    const note = this.wiNote.textContent ?? '';
    if (!threads.length && !note) {
      this.wiNote.textContent = ' needs a recorded run: lab.run(..., record=True)';
    } else if ((threads.length && note.startsWith(' needs')) || (v.what_if && note === RUNNING && !busy)) {
      this.wiNote.textContent = '';
    }
    if (tab === 'whatif') {
      this.wiBox.innerHTML = renderWhatIf(v.what_if);
    }
  }
}
