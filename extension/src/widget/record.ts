/**
 * The run widget's record / replay state: what the "record" indicator says and which of the
 * Record / Step back buttons apply. Pure functions (tested with Jest).
 */

/** The `record` part of a run's view (symphony_lab.lab.Lab._record_view). */
export interface RecordView {
  recorded: boolean;
  recording: boolean;
  complete: boolean;
  preds: number;
  replay_of: number | null;
  diverged: number;
  can_step_back: boolean;
}

export type RecordState = 'off' | 'recording' | 'partial' | 'recorded' | 'replay';

export interface RecordInfo {
  state: RecordState;
  label: string;
  title: string;
  canRecord: boolean;
  canStepBack: boolean;
}

const NONE: RecordView = {
  recorded: false,
  recording: false,
  complete: false,
  preds: 0,
  replay_of: null,
  diverged: 0,
  can_step_back: false
};

/**
 * The indicator for a run: "replay of pid 3" for a stepped-back run, "● rec" while a run is
 * recorded from its start, "partial" when recording began mid-run (it cannot be replayed).
 * `live`: the process has not ended; `atEntry`: it is stopped before its first line (the only
 * moment a recording started from the widget is complete).
 */
export function recordInfo(r: Partial<RecordView> | null | undefined, live: boolean, atEntry: boolean): RecordInfo {
  const v: RecordView = { ...NONE, ...(r ?? {}) };
  const n = `${v.preds} pred${v.preds === 1 ? '' : 's'}`;
  let state: RecordState;
  let label: string;
  let title: string;
  if (v.replay_of !== null && v.replay_of !== undefined) {
    state = 'replay';
    label = `⟲ replay of pid ${v.replay_of}` + (v.diverged ? ' · diverged' : '');
    title = 'this process replays a recorded run: its preds get the recorded results' +
      (v.diverged ? '; it diverged from the recording and runs live from there' : '') +
      (v.recorded ? ` (itself recorded: ${n} so far)` : '');
  } else if (v.recorded && !v.complete) {
    state = 'partial';
    label = `● rec (partial) · ${n}`;
    title = 'recording started mid-run: this run cannot be replayed or stepped back';
  } else if (v.recorded) {
    state = v.recording ? 'recording' : 'recorded';
    label = `${v.recording ? '●' : '○'} rec · ${n}`;
    title = v.recording ? 'recording every syscall result: Step back replays to an earlier pred' : 'recorded';
  } else {
    state = 'off';
    label = 'not recorded';
    title = atEntry ? 'press Record to record this run from its start' : 'launch with record=True (or press Record on entry) to step back';
  }
  return { state, label, title, canRecord: live && !v.recorded, canStepBack: !!v.can_step_back };
}
