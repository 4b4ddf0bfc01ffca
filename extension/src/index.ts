/**
 * Symphony Lab for JupyterLab: the sidebar (left area) and a command to open it.
 */

import { ILabShell, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { LabIcon } from '@jupyterlab/ui-components';

import { SymphonySidebar } from './sidebar';

const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g class="jp-icon3" fill="#616161">' +
  '<path d="M4 18V6h2v12H4zm4-4V6h2v8H8zm4 6V6h2v14h-2zm4-8V6h2v6h-2zm4 4V6h2v10h-2z"/></g></svg>';

export const symphonyIcon = new LabIcon({ name: 'symphony-lab:icon', svgstr: ICON_SVG });

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'symphony-lab:plugin',
  description: 'Symphony Lab: debug LLM inference programs (LIPs) from a sidebar',
  autoStart: true,
  requires: [ILabShell],
  optional: [ICommandPalette],
  activate: (app: JupyterFrontEnd, shell: ILabShell, palette: ICommandPalette | null) => {
    const sidebar = new SymphonySidebar();
    sidebar.title.icon = symphonyIcon;
    shell.add(sidebar, 'left', { rank: 600 });
    const follow = () => {
      const w: any = shell.currentWidget;
      const kid = w?.sessionContext?.session?.kernel?.id ?? null;
      sidebar.setPreferredKernel(kid);
    };
    shell.currentChanged.connect(follow);
    app.commands.addCommand('symphony-lab:open', {
      label: 'Open Symphony Lab',
      execute: () => shell.activateById(sidebar.id)
    });
    palette?.addItem({ command: 'symphony-lab:open', category: 'Symphony Lab' });
    console.log('Symphony Lab extension activated');
  }
};

export default plugin;
