import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

/**
 * The service's code is as its formatter writes it (`npm run format`; .prettierrc.json: 120 columns),
 * and a line longer than 160 characters is one the formatter cannot break (a regular expression, a
 * string of markup, a statement's values): there are at most LONG_LINES_ALLOWED of them.
 */
const ROOT = path.resolve(__dirname, '..');
const SOURCES = ['src', 'workflows', 'activities'];
/** What the formatter checks: the TypeScript of the sources (the console's own files are served as written). */
const FORMATTED = SOURCES.map((dir) => `${dir}/**/*.ts`);
const LONG_LINE = 160;
const LONG_LINES_ALLOWED = 40;

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const relative = `${dir}/${entry.name}`;
    if (entry.isDirectory()) return sourceFiles(relative);
    return entry.name.endsWith('.ts') ? [relative] : [];
  });
}

test('the formatter would change nothing', async () => {
  const prettier = path.join(ROOT, 'node_modules/prettier/bin/prettier.cjs');
  const checked = await promisify(execFile)(process.execPath, [prettier, '--check', ...FORMATTED], { cwd: ROOT }).then(
    () => ({ unformatted: '' }),
    (error: { stdout?: string; stderr?: string }) => ({ unformatted: `${error.stdout ?? ''}${error.stderr ?? ''}` }),
  );
  expect(checked.unformatted).toBe('');
}, 120_000);

test(`at most ${LONG_LINES_ALLOWED} lines of src/ are longer than ${LONG_LINE} characters`, () => {
  const long = sourceFiles('src').flatMap((file) =>
    fs
      .readFileSync(path.join(ROOT, file), 'utf8')
      .split('\n')
      .flatMap((line, index) => (line.length > LONG_LINE ? [`${file}:${index + 1}`] : [])),
  );
  expect(long.length <= LONG_LINES_ALLOWED ? [] : long).toEqual([]);
});
