/**
 * How a notebook widget reaches the kernel's lab: the Jupyter server's Symphony Lab WebSocket
 * when the page is a Jupyter page (commands then never wait behind a busy kernel), else the
 * widget's own comm. No JupyterLab imports: this is bundled into the anywidget ESM.
 */

import { AnyCommand, ArgsOf, BodyOf, EventMsg, labSocketUrl, Request, Requester } from './protocol';

export interface PageServer {
  baseUrl: string;
  wsUrl: string;
  token: string;
}

/** The Jupyter server this page came from (JupyterLab and Notebook 7 embed their config). */
export function pageServer(doc: Document | undefined = typeof document === 'undefined' ? undefined : document): PageServer | null {
  const el = doc?.getElementById('jupyter-config-data');
  if (!el || !el.textContent) {
    return null;
  }
  try {
    const c = JSON.parse(el.textContent);
    const baseUrl: string = c.baseUrl || '/';
    const loc = doc!.location;
    const wsUrl: string = c.wsUrl || `${loc.protocol === 'https:' ? 'wss:' : 'ws:'}//${loc.host}${baseUrl}`;
    return { baseUrl, wsUrl, token: c.token || '' };
  } catch {
    return null;
  }
}

export interface CommModel {
  send(content: any): void;
  on(name: string, cb: (...args: any[]) => void): void;
  off?(name: string, cb?: (...args: any[]) => void): void;
}

export class WidgetTransport {
  readonly requester: Requester;
  kind: 'server' | 'comm' | 'connecting' = 'connecting';
  private ws: WebSocket | null = null;
  private onCustom = (msg: any) => this.requester.receive(msg);

  constructor(
    private model: CommModel,
    kernelId: string,
    onEvent: (ev: EventMsg) => void,
    onError: (text: string) => void,
    onKind: (kind: string) => void = () => undefined
  ) {
    this.requester = new Requester(req => this.send(req), onEvent, onError);
    model.on('msg:custom', this.onCustom);
    this.server = pageServer();
    this.kernelId = kernelId;
    this.onKind = onKind;
    if (!this.server || !kernelId || typeof WebSocket === 'undefined') {
      this.setKind('comm');
      return;
    }
    this.connect();
  }

  private server: PageServer | null;
  private kernelId: string;
  private onKind: (kind: string) => void;
  private retries = 0;
  private retryTimer: any = null;
  private disposed = false;

  private setKind(k: 'server' | 'comm' | 'connecting'): void {
    if (this.kind !== k) {
      this.kind = k;
      this.onKind(k);
    }
  }

  /** Open the server route; until it is up (the kernel's lab may still be starting), use the comm and retry. */
  private connect(): void {
    if (this.disposed || !this.server) {
      return;
    }
    const ws = new WebSocket(labSocketUrl(this.server.wsUrl, this.kernelId, this.server.token));
    let opened = false;
    ws.onopen = () => {
      opened = true;
      this.retries = 0;
      this.ws = ws;
      this.setKind('server');
    };
    ws.onmessage = e => this.requester.receive(e.data);
    ws.onclose = () => {
      if (this.ws === ws) {
        this.ws = null;
      }
      this.setKind('comm');
      if (!this.disposed && this.retries < 60) {
        this.retries++;
        this.retryTimer = setTimeout(() => this.connect(), opened ? 1000 : Math.min(5000, 500 * this.retries));
      }
    };
  }

  private send(req: Request): void {
    if (this.ws && this.ws.readyState === 1) {
      this.ws.send(JSON.stringify(req));
    } else {
      this.model.send(req);
    }
  }

  request<C extends AnyCommand>(command: C, args: ArgsOf<C> = {} as ArgsOf<C>): Promise<BodyOf<C>> {
    return this.requester.request(command, args);
  }

  dispose(): void {
    this.disposed = true;
    clearTimeout(this.retryTimer);
    this.model.off?.('msg:custom', this.onCustom);
    this.ws?.close();
    this.requester.failAll('widget closed');
  }
}
