import fs from 'node:fs';
import path from 'node:path';
import { handleImports, importCycles, importKey, LAYERS, layerOf, packageImports, projectImports, taskWritesOutsideEngine, upwardImports } from '../../scripts/layers';

/** The layering of docs/decisions.md ("Layers"), checked on every import of src/, workflows/ and activities/. */
const imports = projectImports();

test('every source file belongs to a layer', () => {
  const files = [...new Set(imports.flatMap((edge) => [edge.from, edge.to]))];
  expect(files.filter((file) => layerOf(file) < 0)).toEqual([]);
});

test('no import cycle', () => {
  expect(importCycles(imports)).toEqual([]);
});

test('no import from a lower layer up to a higher one', () => {
  const upward = upwardImports(imports).map((edge) => `${importKey(edge)} (${LAYERS[layerOf(edge.from)].name} -> ${LAYERS[layerOf(edge.to)].name})`);
  expect(upward).toEqual([]);
});

test('the HTTP routes hold no database pool, notification bus or Temporal client', () => {
  expect(handleImports([...imports, ...packageImports()]).map(importKey)).toEqual([]);
});

test('only the task engine calls the statements that write tasks', () => {
  expect(taskWritesOutsideEngine(imports).map((edge) => `${importKey(edge)} (${edge.values?.join(', ') ?? '*'})`)).toEqual([]);
});

test('the database layer keeps no module-level mutable state: the trust policy is an argument of its rules', () => {
  const files = (fs.readdirSync('src/db', { recursive: true }) as string[]).filter((file) => file.endsWith('.ts'));
  const mutable = files.filter((file) => /^(export )?(let|var) /m.test(fs.readFileSync(path.join('src/db', file), 'utf8')));
  expect(mutable).toEqual([]);
});

test('only the task engine makes the effects due after a commit: slot hand-offs and webhook first attempts', () => {
  // The senders' own module (src/tasks/handoffs.ts) sits in src/tasks; src/webhooks/sender.ts implements `send`.
  const allowed = (file: string) => file.startsWith('src/tasks/') || file === 'src/webhooks/sender.ts';
  const effect = /\bhandoffs\??\.deliver\(|\bwebhooks\??\.send\(/;
  const files = ['src', 'activities', 'workflows'].flatMap((root) =>
    (fs.readdirSync(root, { recursive: true }) as string[]).filter((file) => file.endsWith('.ts')).map((file) => path.posix.join(root, file.split(path.sep).join('/'))),
  );
  expect(files.filter((file) => !allowed(file) && effect.test(fs.readFileSync(file, 'utf8')))).toEqual([]);
});
