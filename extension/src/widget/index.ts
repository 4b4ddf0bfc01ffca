/**
 * The notebook widget (anywidget ESM, bundled into symphony_lab/widgets/static/widget.js).
 *
 * kind "run": one LIP run — controls (step back, step into, step over, step out, continue, pause,
 * override, relaunch, cancel, record; keys s/v/f/c/p/u while the widget has focus), the record /
 * replay indicator, three tabs: Run ( the stop (source line, input tokens, top-k
 * with "use" buttons), the token stream coloured by probability, the LIP's output, the KV fork
 * tree and the scheduler timeline. Step back replays the recorded run into a new process
 * stopped after the previous pred; the widget follows the new pid.
 * kind "engine": the KV tree and the timeline of the whole engine.
 */

import { renderFileDetails, renderTreeSvg } from '../kvtree';
import { describeStop, primaryStop, statusBadge, STEP_KEYS, stopDist, threadActions } from '../state';
import { renderTimelineLegend, renderTimelineSvg } from '../timeline';
import { escapeHtml, renderLanes, renderTokens, renderTopK, showText } from '../tokens';
import type { AnyCommand, ArgsOf } from '../protocol';
import { WidgetTransport } from '../transport';
import { button, h } from './dom';
import { AnalysisPanels } from './panels';
import { recordInfo } from './record';

type Model = {
  get(name: string): any;
  on(name: string, cb: (...a: any[]) => void): void;
  off?(name: string, cb?: (...a: any[]) => void): void;
  send(content: any): void;
};

function render({ model, el }: { model: Model; el: HTMLElement }): () => void {
  const root = h('div', 'symphony-lab-widget');
  el.appendChild(root);
  const kind: string = model.get('kind') || 'run';
  root.dataset.kind = kind;
  let selectedFile: number | null = null;
  const modelTopk = new Map<number, any[]>();
  let busy = false;

  const head = h('div', 'sl-head');
  const errorBox = h('div', 'sl-error');
  const controls = h('div', 'sl-controls');
  const stopBox = h('div', 'sl-stop');
  const tokensBox = h('div', 'sl-tokens');
  const outputBox = h('pre', 'sl-output');
  const kvBox = h('div', 'sl-kv');
  const kvDetails = h('div', 'sl-kv-details');
  // the run's KV tree: its own processes or the whole engine; a range input scrubs the kept trees
  const kvControls = h('div', 'sl-kv-controls');
  const kvScope = document.createElement('input');
  kvScope.type = 'checkbox';
  kvScope.className = 'sl-kv-scope';
  const kvScrub = document.createElement('input');
  kvScrub.type = 'range';
  kvScrub.className = 'sl-kv-scrub';
  kvScrub.min = '0';
  const kvNote = h('span', 'sl-kv-note');
  const kvLive = button('newest', 'sl-kv-live', 'show the newest KV tree again');
  const tlBox = h('div', 'sl-tl');
  // the tabs: the run itself, its profile, the what-if explorer
  const tabs = h(
    'div',
    'sl-tabs',
    [['run', 'Run'], ['profile', 'Profile'], ['whatif', 'What-if']].map(([k, l]) => `<button class="sl-tab" data-tab="${k}">${l}</button>`).join('')
  );
  // the Profile and What-if tabs (their callbacks run on clicks, once everything below is defined)
  const panels = new AnalysisPanels({
    request: (command, args) => act(command, args),
    error: text => showError(text),
    pid: () => view().pid,
    refresh: () => update()
  });
  const runPanel = h('div', 'sl-panel sl-panel-run');

  const bBack = button('◀ Step back', 'sl-step-back', `replay the recorded run to the previous pred (a new process) (${STEP_KEYS.step_back})`);
  const bStep = button('Step', 'sl-step', `step into: run the stopped thread until its next pred returns, or the first pred of a thread it spawns (${STEP_KEYS.step})`);
  const bOver = button('Step over', 'sl-step-over', `step over: run to this thread's next pred in this function or a caller (calls and spawned threads run through) (${STEP_KEYS.step_over})`);
  const bOut = button('Step out', 'sl-step-out', `step out: run until the thread leaves the function it is stopped in (a spawned thread that ends: the main thread's next stop) (${STEP_KEYS.step_out})`);
  const bCont = button('Continue', 'sl-continue', `resume the stopped thread (${STEP_KEYS.continue})`);
  const bPause = button('Pause', 'sl-pause', `stop every thread at its next system call (${STEP_KEYS.pause})`);
  const bRelaunch = button('Relaunch', 'sl-relaunch', "run again with the cell's current definition");
  const bCancel = button('Cancel', 'sl-cancel', 'cancel the process');
  const overrideInput = document.createElement('input');
  overrideInput.className = 'sl-override-text';
  overrideInput.placeholder = 'token text, e.g. " Paris"';
  const bOverride = button('Override', 'sl-override', 'make the stopped pred choose this token');
  const transportTag = h('span', 'sl-transport');
  const recTag = h('span', 'sl-rec');
  const bRecord = button('● Record', 'sl-record', "record this run's syscall results (on entry: from its start, so it can be stepped back)");

  const section = (title: string, body: HTMLElement[], open = true): HTMLElement => {
    const d = document.createElement('details');
    d.className = 'sl-section';
    d.open = open;
    d.innerHTML = `<summary>${escapeHtml(title)}</summary>`;
    body.forEach(b => d.appendChild(b));
    return d;
  };

  if (kind === 'run') {
    [bBack, bStep, bOver, bOut, bCont, bPause, bRelaunch, bCancel].forEach(b => controls.appendChild(b));
    controls.appendChild(h('span', 'sl-sep', '│'));
    controls.appendChild(overrideInput);
    controls.appendChild(bOverride);
    controls.appendChild(h('span', 'sl-sep', '│'));
    controls.appendChild(bRecord);
    controls.appendChild(recTag);
    controls.appendChild(transportTag);
    root.append(head, controls, errorBox, tabs, runPanel, panels.profile, panels.whatIf);
    runPanel.append(stopBox);
    runPanel.appendChild(section('Tokens', [tokensBox]));
    const scopeLabel = h('label', 'sl-kv-scope-label');
    scopeLabel.append(kvScope, document.createTextNode(' whole engine '));
    kvControls.append(scopeLabel, kvScrub, kvLive, kvNote);
    runPanel.appendChild(section('Output', [outputBox]));
  } else {
    root.append(head, errorBox, runPanel);
  }
  runPanel.appendChild(section('KV fork tree', kind === 'run' ? [kvControls, kvBox, kvDetails] : [kvBox, kvDetails]));
  runPanel.appendChild(section('Scheduler timeline', [tlBox]));
  const showTab = (name: string) => {
    root.dataset.tab = name;
    runPanel.style.display = name === 'run' ? '' : 'none';
    panels.profile.style.display = name === 'profile' ? '' : 'none';
    panels.whatIf.style.display = name === 'whatif' ? '' : 'none';
    tabs.querySelectorAll('.sl-tab').forEach(t => t.classList.toggle('sl-tab-on', (t as HTMLElement).dataset.tab === name));
  };
  tabs.addEventListener('click', e => {
    const t = (e.target as HTMLElement).closest('.sl-tab') as HTMLElement | null;
    if (t && t.dataset.tab) {
      showTab(t.dataset.tab);
      update();
    }
  });
  showTab('run');

  const showError = (text: string) => {
    errorBox.textContent = text;
    errorBox.style.display = text ? 'block' : 'none';
  };
  showError('');

  const transport = new WidgetTransport(
    model,
    model.get('kernel_id') || '',
    () => undefined,
    text => showError(text),
    k => {
      root.dataset.transport = k;
      transportTag.textContent = k === 'server' ? 'via server' : k === 'comm' ? 'via kernel' : '…';
    }
  );

  const view = () => model.get('view') || {};

  const act = async <C extends AnyCommand>(command: C, args: ArgsOf<C>) => {
    if (busy) {
      return;
    }
    busy = true;
    root.dataset.busy = '1';
    showError('');
    try {
      await transport.request(command, args);
    } catch (e) {
      showError(`${command}: ${(e as Error).message}`);
    } finally {
      busy = false;
      delete root.dataset.busy;
      update();
    }
  };

  const stopArgs = () => {
    const v = view();
    const s = primaryStop(v.stops ?? [], v.pid ?? null);
    return s ? { pid: s.pid, tid: s.tid } : { pid: v.pid };
  };

  bStep.onclick = () => act('step', stopArgs());
  bOver.onclick = () => act('step_over', stopArgs());
  bOut.onclick = () => act('step_out', stopArgs());
  // the stepping keys while the widget has focus (not while typing in one of its inputs); kept
  // from JupyterLab's own shortcuts (a notebook's command mode binds c, v, f...)
  root.tabIndex = 0;
  root.dataset.lmSuppressShortcuts = 'true';
  const keyButtons: Record<string, HTMLButtonElement> = {
    [STEP_KEYS.step]: bStep,
    [STEP_KEYS.step_over]: bOver,
    [STEP_KEYS.step_out]: bOut,
    [STEP_KEYS.continue]: bCont,
    [STEP_KEYS.pause]: bPause,
    [STEP_KEYS.step_back]: bBack
  };
  root.addEventListener('keydown', e => {
    const tag = (e.target as HTMLElement).tagName;
    if (kind !== 'run' || e.ctrlKey || e.metaKey || e.altKey || tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA') {
      return;
    }
    const b = keyButtons[e.key];
    if (b) {
      e.preventDefault();
      e.stopPropagation();
      if (!b.disabled) {
        b.click();
      }
    }
  });
  bBack.onclick = () => act('step_back', { ...stopArgs(), steps: 1 });
  bRecord.onclick = () => act('record', { pid: view().pid, enabled: true });
  bCont.onclick = () => act('continue', stopArgs());
  bPause.onclick = () => act('pause', { pid: view().pid });
  bRelaunch.onclick = () => act('relaunch', { pid: view().pid });
  bCancel.onclick = () => act('cancel', { pid: view().pid });
  bOverride.onclick = () => {
    const text = overrideInput.value;
    if (!text) {
      showError('override: type the token text first (one token, e.g. " Paris")');
      return;
    }
    act('override', { ...stopArgs(), text });
  };
  stopBox.addEventListener('click', e => {
    const t = (e.target as HTMLElement).closest('.sl-override-pick') as HTMLElement | null;
    if (t && t.dataset.token) {
      act('override', { ...stopArgs(), token: Number(t.dataset.token) });
    }
  });
  kvScope.onchange = () => act('set_view', { pid: view().pid, scope: kvScope.checked ? 'engine' : 'process' });
  kvScrub.oninput = () => act('set_view', { pid: view().pid, kv_index: Number(kvScrub.value) });
  kvLive.onclick = () => act('set_view', { pid: view().pid, kv_index: null });
  kvBox.addEventListener('click', e => {
    const g = (e.target as Element).closest('[data-file]') as HTMLElement | null;
    if (g) {
      selectedFile = Number(g.getAttribute('data-file'));
      update();
    }
  });

  function update(): void {
    const v = view();
    const eng = v.engine ?? {};
    if (kind === 'run') {
      const status: string = v.status ?? 'starting';
      root.dataset.status = status;
      root.dataset.pid = v.pid == null ? '' : String(v.pid);
      head.innerHTML =
        `<b>${escapeHtml(v.name ?? 'LIP')}</b> <span class="sl-pid">pid ${v.pid ?? '–'}</span> ` +
        `<span class="sl-status" style="background:${statusBadge(status)}">${escapeHtml(status)}</span>` +
        (eng.loading ? ' <span class="sl-note">loading the model…</span>' : '') +
        (eng.model ? ` <span class="sl-note">${escapeHtml(eng.model)}</span>` : '');
      const stop = primaryStop(v.stops ?? [], v.pid ?? null);
      root.dataset.stopId = stop ? String(stop.stop_id) : '';
      root.dataset.stopWhere = stop ? stop.where : '';
      const thread = stop ? (v.threads ?? []).find((t: any) => t.tid === stop.tid) : (v.threads ?? [])[0];
      const a = threadActions(thread ?? (stop ? { tid: stop.tid, name: '', state: 'stopped', call: stop.call, preds: 0, stopped: stop } : undefined), stop);
      bStep.disabled = busy || !a.step;
      bOver.disabled = busy || !a.step;
      bOut.disabled = busy || !a.step;
      bCont.disabled = busy || !a.continue;
      bPause.disabled = busy || !a.pause;
      bOverride.disabled = busy || !stop;
      bRelaunch.disabled = busy || v.pid == null;
      const live = v.pid != null && !['finished', 'failed', 'cancelled'].includes(status);
      const rec = recordInfo(v.record, live, !!stop && stop.where === 'entry');
      root.dataset.record = rec.state;
      root.dataset.replayOf = v.record?.replay_of == null ? '' : String(v.record.replay_of);
      recTag.textContent = rec.label;
      recTag.title = rec.title;
      recTag.className = `sl-rec sl-rec-${rec.state}`;
      bRecord.disabled = busy || !rec.canRecord;
      bBack.disabled = busy || !stop || !rec.canStepBack;
      bCancel.disabled = busy || v.pid == null || ['finished', 'failed', 'cancelled'].includes(status);
      if (v.launch_error) {
        showError(v.launch_error);
      }
      if (stop) {
        const d = stopDist(stop);
        // after an override the stop's distribution is the forced one: keep showing the model's own top-k
        if (d && d.chosen?.by !== 'override') {
          modelTopk.set(stop.stop_id, d.topk);
        } else if (d && modelTopk.has(stop.stop_id)) {
          d.topk = modelTopk.get(stop.stop_id)!;
        }
        const src = stop.source
          ? `<pre class="sl-source">${stop.source.lines
              .map((l: any) => `<span class="${l.current ? 'sl-cur' : ''}">${String(l.n).padStart(4)}  ${escapeHtml(l.text)}</span>`)
              .join('\n')}</pre>`
          : '';
        const input = stop.input
          ? `<div class="sl-input">input (${stop.input.n_tokens ?? stop.input.ids.length} tokens): <code>${escapeHtml(showText(stop.input.text.slice(-200)))}</code></div>`
          : '';
        const dist = d
          ? `<div class="sl-dist">chosen: <code class="sl-chosen-text">${escapeHtml(showText(d.chosen?.text ?? ''))}</code> ` +
            `(p=${(d.chosen?.p ?? 0).toFixed(3)}${d.chosen?.by === 'override' ? ', override' : ''})${renderTopK(d.topk, d.chosen?.token ?? null, true)}</div>`
          : '';
        stopBox.innerHTML = `<div class="sl-stop-line">${escapeHtml(describeStop(stop))}</div>${src}${input}${dist}`;
        stopBox.style.display = 'block';
      } else {
        stopBox.innerHTML = '';
        stopBox.style.display = 'none';
      }
      // one lane per thread (a beam search's threads never interleave); the flat stream carries
      // each token's top-k tooltip when there is only one thread
      const lanes = (v.lanes ?? []).filter((l: any) => l.tokens.length);
      tokensBox.innerHTML =
        lanes.length > 1
          ? renderLanes(lanes)
          : (v.tokens ?? []).length
            ? renderTokens(v.tokens)
            : lanes.length
              ? renderLanes(lanes)
              : '<div class="sl-empty">no tokens yet</div>';
      const kv = v.kv_tree ?? {};
      kvScope.checked = v.scope === 'engine';
      kvScrub.max = String(Math.max(0, (kv.kept ?? 1) - 1));
      kvScrub.value = String(kv.index ?? 0);
      kvScrub.disabled = busy || !(kv.kept > 1);
      kvLive.disabled = busy || kv.source !== 'kept';
      root.dataset.kvSource = kv.source ?? '';
      kvNote.textContent =
        kv.source === 'kept'
          ? `kept tree ${(kv.index ?? 0) + 1}/${kv.kept}${status === 'finished' || status === 'failed' ? ' (the run has ended)' : ''}`
          : kv.kept
            ? `live · ${kv.kept} kept`
            : 'live';
      const out = (v.messages ?? []).join('');
      const res = v.result === null || v.result === undefined ? '' : `\n── result ──\n${typeof v.result === 'string' ? v.result : JSON.stringify(v.result)}`;
      outputBox.textContent = out + res + (v.error ? `\n── error ──\n${v.error}` : '');
      panels.update(v, root.dataset.tab ?? 'run', busy);
      root.dataset.profiled = v.profile ? '1' : '';
      root.dataset.whatIf = v.what_if ? String(v.what_if.diverge_at ?? 'same') : '';
    } else {
      head.innerHTML = `<b>Symphony engine</b> ${eng.model ? escapeHtml(eng.model) : ''} ${eng.loading ? '(loading…)' : ''}`;
    }
    if (v.view_error) {
      showError(v.view_error); // the kernel could not refresh this view (it retries): the last good one shows
    }
    if (v.kv_tree) {
      kvBox.innerHTML = renderTreeSvg(v.kv_tree, selectedFile);
      kvDetails.innerHTML = renderFileDetails((v.kv_tree.files ?? []).find((f: any) => f.file === selectedFile));
    }
    if (v.timeline) {
      tlBox.innerHTML = renderTimelineSvg(v.timeline, 560, 150) + renderTimelineLegend(v.timeline);
    }
  }

  const onChange = () => update();
  model.on('change:view', onChange);
  update();
  return () => {
    model.off?.('change:view', onChange);
    transport.dispose();
  };
}

export default { render };
