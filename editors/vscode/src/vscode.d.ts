// The part of VS Code's extension API this extension uses, declared here so that building it needs
// no download (`@types/vscode`); VS Code itself provides the `vscode` module at run time.
declare module 'vscode' {
  export interface Disposable {
    dispose(): unknown;
  }
  export interface ExtensionContext {
    subscriptions: Disposable[];
  }
  export interface WorkspaceFolder {
    readonly name: string;
  }
  export interface WorkspaceConfiguration {
    get<T>(section: string, defaultValue: T): T;
  }
  export interface DebugConfiguration {
    type: string;
    name: string;
    request: string;
    [key: string]: unknown;
  }
  export interface DebugSession {
    readonly configuration: DebugConfiguration;
  }
  export class DebugAdapterExecutable {
    constructor(command: string, args?: string[]);
  }
  export class DebugAdapterServer {
    constructor(port: number, host?: string);
  }
  export type DebugAdapterDescriptor = DebugAdapterExecutable | DebugAdapterServer;
  export interface DebugAdapterDescriptorFactory {
    createDebugAdapterDescriptor(
      session: DebugSession,
      executable: DebugAdapterExecutable | undefined
    ): DebugAdapterDescriptor;
  }
  export interface DebugConfigurationProvider {
    resolveDebugConfiguration?(
      folder: WorkspaceFolder | undefined,
      config: DebugConfiguration
    ): DebugConfiguration | undefined | null;
  }
  export namespace debug {
    function registerDebugAdapterDescriptorFactory(
      debugType: string,
      factory: DebugAdapterDescriptorFactory
    ): Disposable;
    function registerDebugConfigurationProvider(
      debugType: string,
      provider: DebugConfigurationProvider
    ): Disposable;
  }
  export namespace workspace {
    function getConfiguration(section?: string): WorkspaceConfiguration;
  }
  export namespace window {
    function showErrorMessage(message: string): Thenable<string | undefined>;
  }
}
