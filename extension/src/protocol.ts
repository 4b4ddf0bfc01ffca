/**
 * The debugger protocol as the front-ends speak it (docs/protocol.md): DAP-shaped requests,
 * responses and events, a checker for what arrives, and a small request/response matcher
 * that works over any transport (the server's WebSocket, or a widget's comm).
 */

import type * as P from './generated/protocol';
import type { LabSnapshot } from './session';

// The protocol's types are generated from the Python schema (symphony_lab/debugger/protocol_schema.py)
// by `python -m symphony_lab.debugger.schema_ts`; see ./generated/protocol.ts.
export type {
  Breakpoint,
  CommandArguments,
  CommandBodies,
  CommandName,
  DistResult,
  Event,
  EventBodies,
  EventName,
  Json,
  KVTree,
  ProfileBody,
  Stop,
  Timeline as TimelineBody,
  WhatIfBody
} from './generated/protocol';

/** The commands the notebook's lab layer answers itself (symphony_lab/jupyter/messages.py, LAB_COMMANDS). */
export interface LabCommandArguments {
  lab_view: { pid?: number | null; since?: number };
  relaunch: { pid: number; stop_on_entry?: boolean };
  cancel: { pid: number };
  set_view: { pid?: number | null; scope?: string; kv_index?: number | null };
}

export interface LabCommandBodies {
  lab_view: LabSnapshot;
  relaunch: P.Json;
  cancel: P.Json;
  set_view: P.Json;
}

/** A debugger command, or one of the lab layer's. */
export type AnyCommand = P.CommandName | keyof LabCommandArguments;
export type ArgsOf<C extends AnyCommand> = C extends P.CommandName
  ? P.CommandArguments[C]
  : C extends keyof LabCommandArguments
    ? LabCommandArguments[C]
    : never;
export type BodyOf<C extends AnyCommand> = C extends P.CommandName
  ? P.CommandBodies[C]
  : C extends keyof LabCommandBodies
    ? LabCommandBodies[C]
    : never;

export interface Request<C extends AnyCommand = AnyCommand> {
  type: 'request';
  seq: number;
  command: C;
  arguments?: ArgsOf<C>;
}

/** A response as it arrives: `body` is the command's body type once `success` is checked. */
export type Response = P.Response | LabResponse;

interface LabResponse {
  type: 'response';
  request_seq: number | null;
  command: keyof LabCommandArguments;
  success: true;
  body: LabCommandBodies[keyof LabCommandBodies];
}

/** The lab layer's own event: a fresh snapshot of everything the sidebar shows. */
export interface LabViewEvent {
  type: 'event';
  event: 'lab_view';
  seq?: number;
  ts?: number;
  body: LabSnapshot;
}

/** An event: the debugger's (discriminated by `event`) or the lab's `lab_view`. */
export type EventMsg = P.Event | LabViewEvent;

export type Incoming = Response | EventMsg | { type: 'error'; message: string };

/** Check a message from the server; returns it typed, or an error string saying what is wrong. */
export function checkIncoming(raw: unknown): { ok: true; msg: Incoming } | { ok: false; error: string } {
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- wire data, checked field by field below
  let m: any = raw;
  if (typeof raw === 'string') {
    try {
      m = JSON.parse(raw);
    } catch (e) {
      return { ok: false, error: `not JSON: ${(e as Error).message}` };
    }
  }
  if (m === null || typeof m !== 'object' || Array.isArray(m)) {
    return { ok: false, error: 'expected a JSON object' };
  }
  switch (m.type) {
    case 'response':
      if (typeof m.success !== 'boolean') {
        return { ok: false, error: "a response needs a boolean 'success'" };
      }
      return { ok: true, msg: m as Response };
    case 'event':
      if (typeof m.event !== 'string') {
        return { ok: false, error: "an event needs a string 'event'" };
      }
      return { ok: true, msg: m as EventMsg };
    case 'error':
      return { ok: true, msg: { type: 'error', message: String(m.message ?? 'error') } };
    default:
      return { ok: false, error: `unknown message type ${JSON.stringify(m.type)}` };
  }
}

/** Build a request; refuses what the server would refuse, so a bug shows up at the source. */
export function makeRequest<C extends AnyCommand>(seq: number, command: C, args: ArgsOf<C> = {} as ArgsOf<C>): Request<C> {
  if (!/^[a-z_]+$/.test(command)) {
    throw new Error(`bad command name ${JSON.stringify(command)}`);
  }
  for (const k of ['pid', 'tid', 'token', 'fid', 'id']) {
    const v = (args as Record<string, unknown>)[k];
    if (v !== undefined && v !== null && !Number.isInteger(v)) {
      throw new Error(`${command}: '${k}' must be an integer, got ${JSON.stringify(v)}`);
    }
  }
  return { type: 'request', seq, command, arguments: args };
}

export class RequestError extends Error {
  constructor(
    message: string,
    readonly response?: Response
  ) {
    super(message);
  }
}

/**
 * Matches responses to requests by `seq` over a send function; events go to `onEvent`.
 * Feed every incoming message to `receive`.
 */
export class Requester {
  private seq = 1;
  private pending = new Map<
    number,
    { resolve: (body: unknown) => void; reject: (e: Error) => void; timer: ReturnType<typeof setTimeout> | null }
  >();

  constructor(
    private send: (req: Request) => void,
    private onEvent: (ev: EventMsg) => void = () => undefined,
    private onError: (text: string) => void = () => undefined,
    private timeoutMs = 60000
  ) {}

  get inFlight(): number {
    return this.pending.size;
  }

  /** Send a command; resolves with its body (typed by the command), rejects with its error. */
  request<C extends AnyCommand>(command: C, args: ArgsOf<C> = {} as ArgsOf<C>): Promise<BodyOf<C>> {
    const req = makeRequest(this.seq++, command, args);
    return new Promise<BodyOf<C>>((resolve, reject) => {
      const timer = this.timeoutMs
        ? setTimeout(() => {
            this.pending.delete(req.seq);
            reject(new RequestError(`${command}: no answer in ${this.timeoutMs / 1000}s`));
          }, this.timeoutMs)
        : null;
      this.pending.set(req.seq, { resolve: body => resolve(body as BodyOf<C>), reject, timer });
      try {
        this.send(req);
      } catch (e) {
        this.pending.delete(req.seq);
        if (timer) {
          clearTimeout(timer);
        }
        reject(e);
      }
    });
  }

  receive(raw: unknown): void {
    const c = checkIncoming(raw);
    if (!c.ok) {
      this.onError(`bad message from server: ${c.error}`);
      return;
    }
    const m = c.msg;
    if (m.type === 'event') {
      this.onEvent(m);
      return;
    }
    if (m.type === 'error') {
      this.onError(m.message);
      return;
    }
    const p = m.request_seq === null ? undefined : this.pending.get(m.request_seq);
    if (!p) {
      if (!m.success) {
        this.onError(m.message ?? 'request failed');
      }
      return;
    }
    this.pending.delete(m.request_seq as number);
    if (p.timer) {
      clearTimeout(p.timer);
    }
    if (m.success) {
      p.resolve(m.body);
    } else {
      p.reject(new RequestError(m.message ?? `${m.command} failed`, m));
    }
  }

  failAll(reason: string): void {
    for (const [, p] of this.pending) {
      if (p.timer) {
        clearTimeout(p.timer);
      }
      p.reject(new RequestError(reason));
    }
    this.pending.clear();
  }
}

/** The URL of a kernel's Symphony Lab WebSocket on a Jupyter server. */
export function labSocketUrl(wsBase: string, kernelId: string, token = ''): string {
  const base = wsBase.endsWith('/') ? wsBase : wsBase + '/';
  const url = `${base}symphony-lab/api/kernels/${encodeURIComponent(kernelId)}/ws`;
  return token ? `${url}?token=${encodeURIComponent(token)}` : url;
}
