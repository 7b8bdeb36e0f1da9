import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..');

/**
 * The node arguments of `npm run <script>` (flags, `--import tsx`, the entry file), so that tests and the
 * benchmark start exactly what is deployed; run them from the project root. Every service script runs node
 * itself: the tsx command would put a parent in between that kills its child when a signal is not
 * answered within 60 ms.
 */
export function npmScriptNodeArgs(script: string): string[] {
  const scripts = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')).scripts as Record<string, string>;
  const words = (scripts[script] ?? '').split('&&').pop()!.trim().split(/\s+/);
  if (words[0] !== 'node') throw new Error(`npm run ${script} does not run node directly: ${scripts[script]}`);
  return words.slice(1);
}
