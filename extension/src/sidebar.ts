/**
 * The Symphony Lab sidebar: processes and threads with their state and debugger controls (step
 * into, step over, step out, continue, pause), the breakpoints list, the KV fork tree, the live
 * scheduler view, a notebook run's profile (the LIP profiler's line table) and the what-if
 * explorer, and an export of the run as a Perfetto trace. Its state is the session model folded
 * from the debugger's events (session.ts), resynced by the lab's snapshots. It talks to the notebook kernel's lab through the jupyter-server
 * extension (REST for status and the trace, a WebSocket for commands and live views).
 */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { Widget } from '@lumino/widgets';

import { renderFileDetails, renderTreeSvg } from './kvtree';
import { EventMsg, labSocketUrl, Requester } from './protocol';
import { ProfileBody, profileThreads, renderProfileTable, renderWhatIf, WhatIfBody } from './profile';
import { LabSnapshot, SessionModel } from './session';
import { describeStop, liveBreakpoints, ProcessView, splitThreads, StopView, statusBadge, threadActions, ThreadView } from './state';
import { mergeBatches, renderTimelineLegend, renderTimelineSvg, Timeline } from './timeline';
import { escapeHtml } from './tokens';

const CMD_TITLES: Record<string, string> = {
  step: 'step into: run until the next pred returns (or the first pred of a thread it spawns)',
  step_over: "step over: run to this thread's next pred in this function or a caller",
  step_out: 'step out: run until the thread leaves the function it is stopped in',
  continue: 'resume the thread',
  pause: 'stop every thread of the process at its next system call'
};

export interface LabStatus {
  version: string;
  kernels: Array<{ kernel_id: string; path: string | null; model?: string }>;
}

export class SymphonySidebar extends Widget {
  private settings = ServerConnection.makeSettings();
  private ws: WebSocket | null = null;
  private requester: Requester;
  private kernelId: string | null = null;
  private preferredKernel: string | null = null;
  private view: LabSnapshot | null = null;
  private model = new SessionModel();
  private profile: ProfileBody | null = null;
  private whatIf: WhatIfBody | null = null;
  private timeline: Timeline | null = null;
  private selectedFile: number | null = null;
  private statusTimer: ReturnType<typeof setInterval> | undefined = undefined;
  private kernels: LabStatus['kernels'] = [];
  private updates = 0;

  constructor() {
    super();
    this.id = 'symphony-lab-sidebar';
    this.addClass('symphony-lab-sidebar');
    this.title.caption = 'Symphony Lab';
    this.requester = new Requester(
      req => {
        if (!this.ws || this.ws.readyState !== 1) {
          throw new Error('not connected to a kernel lab');
        }
        this.ws.send(JSON.stringify(req));
      },
      ev => this.onEvent(ev),
      text => this.showError(text)
    );
    this.node.innerHTML = `
      <div class="sl-conn"><label>kernel <select class="sl-kernel"></select></label> <span class="sl-conn-state">not connected</span></div>
      <div class="sl-error"></div>
      <h3>Processes</h3><div class="sl-procs"></div>
      <h3>Breakpoints</h3><div class="sl-bps"></div>
      <div class="sl-bp-form">syscall <input class="sl-bp-call" value="pred"/> pid <input class="sl-bp-pid"/> hit <input class="sl-bp-hit"/> <button class="sl-btn sl-bp-add">add</button></div>
      <h3>Profile</h3><div class="sl-prof-form">pid <select class="sl-prof-pid"></select> thread <select class="sl-prof-tid"><option value="">all</option></select> <button class="sl-btn sl-prof-start" title="profile this process from now on (a run launched with profile=True is profiled from its start)">Start</button> <button class="sl-btn sl-prof-refresh" title="show its profile so far">Show</button></div><div class="sl-prof"></div>
      <h3>What-if</h3><div class="sl-wi-form">pid <select class="sl-wi-pid"></select> thread <input class="sl-wi-tid" type="number" min="1" value="1"/> position <input class="sl-wi-pos" type="number" min="1"/> token <input class="sl-wi-token" placeholder='e.g. " Rome"'/> max <input class="sl-wi-max" type="number" min="1" max="256" value="8"/> <button class="sl-btn sl-wi-run">Run what-if</button></div><div class="sl-wi-result"></div>
      <h3>KV fork tree</h3><div class="sl-kv"></div><div class="sl-kv-details"></div>
      <h3>Scheduler</h3><div class="sl-tl"></div><div class="sl-queue"></div>
      <h3>Trace</h3><button class="sl-btn sl-export">Export Perfetto trace</button>
    `;
    this.node.addEventListener('click', e => this.onClick(e));
    this.$('.sl-kernel').addEventListener('change', e => this.connect((e.target as HTMLSelectElement).value));
  }

  private $(sel: string): HTMLElement {
    return this.node.querySelector(sel) as HTMLElement;
  }

  /** The notebook in focus changed: follow its kernel if it has a lab. */
  setPreferredKernel(kernelId: string | null): void {
    this.preferredKernel = kernelId;
    if (kernelId && kernelId !== this.kernelId && this.kernels.some(k => k.kernel_id === kernelId)) {
      void this.connect(kernelId);
    }
  }

  protected onAfterAttach(): void {
    void this.refreshStatus();
    this.statusTimer = setInterval(() => void this.refreshStatus(), 3000);
  }

  protected onBeforeDetach(): void {
    clearInterval(this.statusTimer);
  }

  dispose(): void {
    clearInterval(this.statusTimer);
    this.ws?.close();
    super.dispose();
  }

  async api(path: string, init: RequestInit = {}): Promise<Response> {
    const url = URLExt.join(this.settings.baseUrl, 'symphony-lab', 'api', path);
    return ServerConnection.makeRequest(url, init, this.settings);
  }

  async refreshStatus(): Promise<void> {
    let st: LabStatus;
    try {
      const r = await this.api('status');
      if (!r.ok) {
        throw new Error(`status ${r.status}`);
      }
      st = await r.json();
    } catch (e) {
      this.$('.sl-conn-state').textContent = `server extension unreachable (${(e as Error).message})`;
      return;
    }
    this.kernels = st.kernels;
    const sel = this.$('.sl-kernel') as HTMLSelectElement;
    const opts = st.kernels
      .map(k => `<option value="${escapeHtml(k.kernel_id)}">${escapeHtml(k.path || k.kernel_id.slice(0, 8))}</option>`)
      .join('');
    if (sel.innerHTML !== opts) {
      sel.innerHTML = opts;
    }
    if (this.kernelId && !st.kernels.some(k => k.kernel_id === this.kernelId)) {
      this.disconnect('the kernel lab went away');
    }
    if (!this.kernelId && st.kernels.length) {
      const pick = st.kernels.find(k => k.kernel_id === this.preferredKernel) ?? st.kernels[st.kernels.length - 1];
      void this.connect(pick.kernel_id);
    }
    if (this.kernelId) {
      sel.value = this.kernelId;
    } else if (!st.kernels.length) {
      this.$('.sl-conn-state').textContent = 'no notebook has a Symphony Lab yet (from symphony_lab import lab)';
    }
  }

  private disconnect(why: string): void {
    this.ws?.close();
    this.ws = null;
    this.kernelId = null;
    this.requester.failAll(why);
    this.node.dataset.connected = '';
    this.$('.sl-conn-state').textContent = why;
  }

  async connect(kernelId: string): Promise<void> {
    if (kernelId === this.kernelId && this.ws) {
      return;
    }
    this.ws?.close();
    this.kernelId = kernelId;
    this.view = null;
    this.model = new SessionModel();
    this.timeline = null;
    const ws = new WebSocket(labSocketUrl(this.settings.wsUrl, kernelId, this.settings.token));
    this.ws = ws;
    this.$('.sl-conn-state').textContent = 'connecting…';
    ws.onopen = async () => {
      this.node.dataset.connected = kernelId;
      this.$('.sl-conn-state').textContent = 'connected';
      try {
        this.applyView(await this.requester.request('lab_view'));
      } catch (e) {
        const text = (e as Error).message;
        // a kernel whose engine is still loading pushes its first view when it is ready
        this.$('.sl-conn-state').textContent = text === 'the engine is still loading' ? 'connected (engine loading…)' : 'connected';
        if (text !== 'the engine is still loading') {
          this.showError(text);
        }
      }
    };
    ws.onmessage = e => this.requester.receive(e.data);
    ws.onclose = () => {
      if (this.ws === ws) {
        this.disconnect('disconnected');
      }
    };
  }

  private onEvent(ev: EventMsg): void {
    if (ev.event === 'lab_view') {
      this.applyView(ev.body);
    } else if (this.view && this.model.apply(ev)) {
      this.node.dataset.folded = String(this.model.folded);
      this.render();
    }
  }

  private showError(text: string): void {
    const box = this.$('.sl-error');
    box.textContent = text;
    box.style.display = text ? 'block' : 'none';
  }

  applyView(v: LabSnapshot): void {
    this.view = v;
    this.model.resync(v);
    if (v.engine && v.engine.ready) {
      this.$('.sl-conn-state').textContent = `connected · ${v.engine.model ?? ''}`;
    }
    this.timeline = v.timeline
      ? { ...v.timeline, batches: mergeBatches(this.timeline?.batches ?? [], v.timeline.batches ?? []) }
      : this.timeline;
    this.updates++;
    this.node.dataset.updates = String(this.updates);
    this.render();
  }

  private render(): void {
    const v = this.view;
    if (!v) {
      return;
    }
    const stops: StopView[] = this.model.stopList();
    const procs: ProcessView[] = this.model.processList();
    const threadRow = (p: ProcessView, t: ThreadView) => {
      const stop = stops.find(s => s.pid === p.pid && s.tid === t.tid) ?? null;
      const a = threadActions(t, stop);
      const st = stop ? 'stopped' : t.state;
      const btn = (cmd: string, label: string, on: boolean) =>
        on ? `<button class="sl-btn sl-cmd" data-cmd="${cmd}" data-pid="${p.pid}" data-tid="${t.tid}" title="${CMD_TITLES[cmd] ?? cmd}">${label}</button>` : '';
      return (
        `<tr class="sl-thread" data-pid="${p.pid}" data-tid="${t.tid}"><td>t${t.tid}</td><td>${escapeHtml(t.tid > 1 ? t.name : 'main')}</td>` +
        `<td><span class="sl-status" style="background:${statusBadge(st)}">${escapeHtml(st)}</span>${stop ? `<div class="sl-note">${escapeHtml(describeStop(stop))}</div>` : ''}` +
        `<div class="sl-actions">${btn('step', 'step', a.step)}${btn('step_over', 'over', a.step)}${btn('step_out', 'out', a.step)}` +
        `${btn('continue', 'continue', a.continue)}${btn('pause', 'pause', a.pause)}</div></td></tr>`
      );
    };
    // threads grouped under their process; finished threads collapsed (a beam search's 16 stay one line)
    this.$('.sl-procs').innerHTML = procs.length
      ? procs
          .map(p => {
            const { live, finished } = splitThreads(p, stops);
            const state = p.done ? p.status : stops.some(s => s.pid === p.pid) ? 'stopped' : p.status;
            return (
              `<details class="sl-proc" data-pid="${p.pid}"${p.done ? '' : ' open'}><summary><b>pid ${p.pid}</b> ${escapeHtml(p.name)} ` +
              `<span class="sl-status" style="background:${statusBadge(state)}">${escapeHtml(state)}</span> ` +
              `<span class="sl-note">${p.threads.length} thread${p.threads.length === 1 ? '' : 's'}</span></summary>` +
              (live.length ? `<table><tbody>${live.map(t => threadRow(p, t)).join('')}</tbody></table>` : '') +
              (finished.length
                ? `<details class="sl-finished-threads"><summary>${finished.length} finished thread${finished.length === 1 ? '' : 's'}</summary>` +
                  `<table><tbody>${finished.map(t => threadRow(p, t)).join('')}</tbody></table></details>`
                : '') +
              `</details>`
            );
          })
          .join('')
      : '<div class="sl-empty">no processes</div>';
    this.renderRuns();
    const bps = liveBreakpoints(this.model.breakpoints, procs);
    this.$('.sl-bps').innerHTML = bps.length
      ? `<table><tbody>${bps
          .map(
            b =>
              `<tr><td>#${b.id}</td><td><code>${escapeHtml(b.call)}</code>${b.pid ? ' pid ' + b.pid : ''}${b.tid ? ' tid ' + b.tid : ''}${
                b.hit_count ? ` hit ${b.hit_mode}${b.hit_count}` : ''
              }</td><td>${b.hits} hits</td><td><button class="sl-btn sl-bp-rm" data-id="${b.id}">✕</button></td></tr>`
          )
          .join('')}</tbody></table>`
      : '<div class="sl-empty">no breakpoints</div>';
    if (v.kv_tree) {
      this.$('.sl-kv').innerHTML = renderTreeSvg(v.kv_tree, this.selectedFile);
      this.$('.sl-kv-details').innerHTML =
        this.selectedFile === null ? '' : renderFileDetails((v.kv_tree.files ?? []).find(f => f.file === this.selectedFile));
    }
    if (this.timeline) {
      this.$('.sl-tl').innerHTML = renderTimelineSvg(this.timeline, 300, 140) + renderTimelineLegend(this.timeline);
      const q = this.timeline.queue ?? [];
      this.$('.sl-queue').innerHTML = q.length
        ? `queued: ${q.map(x => `${x.pid}.${x.tid} ${x.kind} ${x.remaining} tok`).join(', ')}`
        : '';
    }
  }

  private async onClick(e: Event): Promise<void> {
    const t = e.target as HTMLElement;
    const cmd = t.closest('.sl-cmd') as HTMLElement | null;
    try {
      if (cmd) {
        const command = cmd.dataset.cmd as 'step' | 'step_over' | 'step_out' | 'continue' | 'pause';
        await this.requester.request(command, command === 'pause' ? { pid: Number(cmd.dataset.pid) } : { pid: Number(cmd.dataset.pid), tid: Number(cmd.dataset.tid) });
      } else if (t.closest('.sl-bp-add')) {
        const args: Record<string, unknown> = { call: (this.$('.sl-bp-call') as HTMLInputElement).value || 'pred' };
        const pid = (this.$('.sl-bp-pid') as HTMLInputElement).value;
        const hit = (this.$('.sl-bp-hit') as HTMLInputElement).value;
        if (pid) {
          args.pid = Number(pid);
        }
        if (hit) {
          args.hit_count = Number(hit);
        }
        await this.requester.request('set_breakpoint', args);
      } else if (t.closest('.sl-bp-rm')) {
        await this.requester.request('remove_breakpoint', { id: Number((t.closest('.sl-bp-rm') as HTMLElement).dataset.id) });
      } else if (t.closest('.sl-prof-start')) {
        await this.requester.request('profile_start', { pid: Number((this.$('.sl-prof-pid') as HTMLSelectElement).value) });
        await this.loadProfile();
        return;
      } else if (t.closest('.sl-prof-refresh')) {
        await this.loadProfile();
        return;
      } else if (t.closest('.sl-wi-run')) {
        await this.runWhatIf();
        return;
      } else if (t.closest('.sl-export')) {
        await this.exportTrace();
        return;
      } else {
        const g = t.closest('[data-file]');
        if (g) {
          this.selectedFile = Number(g.getAttribute('data-file'));
          this.render();
        }
        return;
      }
      this.showError('');
      this.applyView(await this.requester.request('lab_view'));
    } catch (err) {
      this.showError((err as Error).message);
    }
  }

  /** The processes in the Profile and What-if pickers: newest first, a notebook's profiled /
   * recorded runs marked (a what-if LIP is left out). */
  private renderRuns(): void {
    const runs = new Map(this.model.runs.map(r => [r.pid, r]));
    const procs = this.model
      .processList()
      .filter(p => p.name !== 'what-if')
      .reverse();
    const fill = (sel: HTMLSelectElement, mark: (pid: number) => string) => {
      const html = procs.map(p => `<option value="${p.pid}">pid ${p.pid} ${escapeHtml(p.name)}${mark(p.pid)}</option>`).join('');
      if (sel.dataset.options !== html) {
        const keep = sel.value;
        sel.innerHTML = html;
        sel.dataset.options = html;
        if (procs.some(p => String(p.pid) === keep)) {
          sel.value = keep;
        }
      }
    };
    fill(this.$('.sl-prof-pid') as HTMLSelectElement, pid => (runs.get(pid)?.profiled ? ' (profiled)' : ''));
    fill(this.$('.sl-wi-pid') as HTMLSelectElement, pid => (runs.get(pid)?.recorded ? ' (recorded)' : ''));
  }

  private renderProfile(): void {
    const tidSel = this.$('.sl-prof-tid') as HTMLSelectElement;
    const keep = tidSel.value;
    tidSel.innerHTML = '<option value="">all</option>' + profileThreads(this.profile).map(t => `<option value="${t}">t${t}</option>`).join('');
    tidSel.value = profileThreads(this.profile).some(t => String(t) === keep) ? keep : '';
    tidSel.onchange = () => this.renderProfile();
    this.$('.sl-prof').innerHTML = renderProfileTable(this.profile, tidSel.value === '' ? null : Number(tidSel.value), 90, true);
  }

  /** The picked run's line table (the lab's `profile` command). */
  async loadProfile(): Promise<void> {
    const pid = Number((this.$('.sl-prof-pid') as HTMLSelectElement).value);
    if (!pid) {
      this.showError('profile: no process to profile yet');
      return;
    }
    try {
      this.profile = await this.requester.request('profile', { pid });
      this.showError('');
    } catch (e) {
      this.profile = null;
      this.showError((e as Error).message);
    }
    this.node.dataset.profileRows = String(this.profile?.lines?.length ?? 0);
    this.renderProfile();
  }

  /** Another token at a position of a recorded run's thread: both continuations (the lab's `what_if`). */
  async runWhatIf(): Promise<void> {
    const val = (sel: string) => (this.$(sel) as HTMLInputElement).value;
    const pid = Number(val('.sl-wi-pid'));
    const text = val('.sl-wi-token');
    const position = Number(val('.sl-wi-pos'));
    if (!pid || !text || !Number.isInteger(position) || position < 1) {
      this.showError('what-if: pick a recorded process, a position (>= 1) and a replacement token');
      return;
    }
    const box = this.$('.sl-wi-result');
    box.innerHTML = '<div class="sl-note">running both continuations…</div>';
    try {
      this.whatIf = await this.requester.request('what_if', {
        pid,
        tid: Number(val('.sl-wi-tid')) || 1,
        position,
        text,
        max_tokens: Number(val('.sl-wi-max')) || 8
      });
      this.showError('');
    } catch (e) {
      this.whatIf = null;
      this.showError((e as Error).message);
    }
    this.node.dataset.whatIf = this.whatIf ? String(this.whatIf.diverge_at ?? 'same') : '';
    box.innerHTML = renderWhatIf(this.whatIf);
  }

  async exportTrace(): Promise<void> {
    if (!this.kernelId) {
      this.showError('connect to a kernel first');
      return;
    }
    const r = await this.api(`kernels/${encodeURIComponent(this.kernelId)}/trace`);
    if (!r.ok) {
      this.showError(`trace export failed: ${r.status}`);
      return;
    }
    const blob = await r.blob();
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = `symphony-trace-${this.kernelId.slice(0, 8)}.json`;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  }
}
