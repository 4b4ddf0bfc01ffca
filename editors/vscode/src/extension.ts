// Registers the `symphony-lip` debug type: VS Code starts `symphony-lab dap` (the setting
// `symphony.adapterCommand`) and speaks the Debug Adapter Protocol to it on stdio, or connects to
// an adapter already listening (`"debugServer": 4711` in launch.json, `symphony-lab dap --port 4711`).
import * as vscode from 'vscode';

export const DEBUG_TYPE = 'symphony-lip';

export function adapterFor(
  config: vscode.DebugConfiguration,
  command: string[]
): vscode.DebugAdapterDescriptor {
  if (typeof config.debugServer === 'number') {
    return new vscode.DebugAdapterServer(config.debugServer, '127.0.0.1');
  }
  const [exe, ...args] = command.length > 0 ? command : ['symphony-lab', 'dap'];
  return new vscode.DebugAdapterExecutable(exe, args);
}

export function activate(context: vscode.ExtensionContext): void {
  context.subscriptions.push(
    vscode.debug.registerDebugAdapterDescriptorFactory(DEBUG_TYPE, {
      createDebugAdapterDescriptor(session) {
        const command = vscode.workspace
          .getConfiguration('symphony')
          .get<string[]>('adapterCommand', ['symphony-lab', 'dap']);
        return adapterFor(session.configuration, command);
      }
    }),
    vscode.debug.registerDebugConfigurationProvider(DEBUG_TYPE, {
      resolveDebugConfiguration(_folder, config) {
        if (config.request === 'launch' && typeof config.program !== 'string') {
          void vscode.window.showErrorMessage(
            'A symphony-lip launch needs "program": "FILE.py:FUNC" in launch.json'
          );
          return undefined;
        }
        return config;
      }
    })
  );
}

export function deactivate(): void {
  // the adapter process ends with its debug session
}
