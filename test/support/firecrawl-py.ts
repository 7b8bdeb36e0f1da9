import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Runs one call of a Firecrawl Python SDK (installed by scripts/ensure-tools.mjs --test into
 * .tools/python-sdks/) through test/support/firecrawl_sdk.py, and returns what it printed.
 */

const root = path.resolve(__dirname, '..', '..');
export const FIRECRAWL_PY_MAJORS = [1, 4] as const;

export interface PythonSdkOutcome {
  version: string;
  result?: any;
  raised?: string;
  message?: string;
  status?: number | null;
}

export function runFirecrawlPy(major: (typeof FIRECRAWL_PY_MAJORS)[number], request: Record<string, unknown>): Promise<PythonSdkOutcome> {
  const python = path.join(root, '.tools', 'bin', 'python');
  const script = path.join(__dirname, 'firecrawl_sdk.py');
  const sdk = path.join(root, '.tools', 'python-sdks', `firecrawl-py-${major}`);
  if (!fs.existsSync(path.join(sdk, '.installed'))) {
    return Promise.reject(new Error(`firecrawl-py ${major}.x is not installed: \`npm test\` installs it, or run \`node scripts/ensure-tools.mjs --test\``));
  }
  const env = { ...process.env, PYTHONPATH: sdk, PYTHONDONTWRITEBYTECODE: '1' };
  return new Promise((resolve, reject) => {
    execFile(python, [script, JSON.stringify(request)], { env, timeout: 240_000 }, (error, stdout, stderr) => {
      if (error) return reject(new Error(`firecrawl-py ${major} failed: ${error.message}\n${stderr}`));
      try {
        resolve(JSON.parse(stdout.trim().split('\n').pop()!) as PythonSdkOutcome);
      } catch {
        reject(new Error(`firecrawl-py ${major} printed no JSON: ${stdout}\n${stderr}`));
      }
    });
  });
}
