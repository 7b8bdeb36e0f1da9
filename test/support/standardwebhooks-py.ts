import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/**
 * Verifies deliveries with the official Python Standard Webhooks library (installed by
 * scripts/ensure-tools.mjs --test into .tools/python-sdks/) through test/support/standardwebhooks_verify.py.
 */

const root = path.resolve(__dirname, '..', '..');

export type PythonVerdict = { verified: true; type: string } | { verified: false; error: string };

export function verifyWithPython(secret: string, deliveries: Array<{ headers: Record<string, string>; body: string }>): Promise<PythonVerdict[]> {
  const python = path.join(root, '.tools', 'bin', 'python');
  const library = path.join(root, '.tools', 'python-sdks', 'standardwebhooks');
  if (!fs.existsSync(path.join(library, '.installed'))) {
    return Promise.reject(new Error('standardwebhooks (Python) is not installed: `npm test` installs it, or run `node scripts/ensure-tools.mjs --test`'));
  }
  const env = { ...process.env, PYTHONPATH: library, PYTHONDONTWRITEBYTECODE: '1' };
  const script = path.join(__dirname, 'standardwebhooks_verify.py');
  return new Promise((resolve, reject) => {
    execFile(python, [script, JSON.stringify({ secret, deliveries })], { env, timeout: 60_000 }, (error, stdout, stderr) => {
      if (error) return reject(new Error(`standardwebhooks (Python) failed: ${error.message}\n${stderr}`));
      resolve((JSON.parse(stdout.trim().split('\n').pop()!) as { results: PythonVerdict[] }).results);
    });
  });
}
