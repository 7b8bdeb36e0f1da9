import fs from 'node:fs';
import path from 'node:path';
import {
  confinedCode,
  confinedCodeIn,
  confinementKey,
  folderCycleImports,
  folderCycles,
  folderImportKey,
  foldersImportedOutOfOrder,
  handleImports,
  importCycles,
  importKey,
  LAYERS,
  layerOf,
  packageImports,
  partialLayerEntries,
  projectImports,
  taskWritesOutsideEngine,
  upwardImports,
} from '../../scripts/layers';

/** The layering of docs/decisions.md ("Layers"), checked on every import of src/, workflows/ and activities/. */
const imports = projectImports();

test('every source file belongs to a layer', () => {
  const files = [...new Set(imports.flatMap((edge) => [edge.from, edge.to]))];
  expect(files.filter((file) => layerOf(file) < 0)).toEqual([]);
});

test('no import cycle', () => {
  expect(importCycles(imports)).toEqual([]);
});

test('every layer entry is a whole folder of src/, workflows/ or activities/, or a file directly in src/', () => {
  expect(partialLayerEntries()).toEqual([]);
});

test('no folder-level import cycle: the folders import each other one way, types included', () => {
  // On failure, the folder imports inside each cycle with the file imports behind them.
  expect(folderCycleImports(imports)).toEqual([]);
});

test('each folder imports only folders listed before it in LAYERS, lowest first', () => {
  expect(foldersImportedOutOfOrder(imports).map(folderImportKey)).toEqual([]);
});

test('the folder-level checks find a cycle that no single file closes, and name its imports', () => {
  const edge = (from: string, to: string, typeOnly = false) => ({ from, to, typeOnly });
  const found = [
    edge('src/tasks/a.ts', 'src/webhooks/b.ts', true),
    edge('src/webhooks/c.ts', 'src/tasks/d.ts'),
    edge('src/db/tasks/e.ts', 'src/contract/f.ts'),
    edge('src/config.ts', 'src/logger.ts'),
  ];
  expect(folderCycles(found)).toEqual([['src/tasks', 'src/webhooks']]);
  expect(folderCycleImports(found)).toEqual(['src/tasks -> src/webhooks: src/tasks/a.ts -> src/webhooks/b.ts (type)', 'src/webhooks -> src/tasks: src/webhooks/c.ts -> src/tasks/d.ts']);
  expect(foldersImportedOutOfOrder(found).map((folderEdge) => `${folderEdge.from} -> ${folderEdge.to}`)).toEqual(['src/tasks -> src/webhooks']);
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

test('SQL is only in src/db, and process.env only in src/config.ts', () => {
  expect(confinedCode().map(confinementKey)).toEqual([]);
});

test('the confinement check finds SQL and environment reads in every form they take', () => {
  const source = [
    "import { sql } from 'slonik';",
    "import type { CommonQueryMethods } from 'slonik';",
    "import { type DatabasePool, sql as tag } from 'slonik';",
    "import * as slonik from 'slonik';",
    "import { createSqlTag } from '@slonik/sql-tag';",
    "import pg from 'pg';",
    "import type { Client } from 'pg';",
    "import { env } from 'node:process';",
    "const pool = require('pg');",
    'await db.query(sql.unsafe`SELECT 1`);',
    'await db.one(sql.type(Row)`SELECT 2`);',
    'const where = sql.fragment`a = ${1}`;',
    'const bare = sql`SELECT 3`;',
    'const url = process.env.DATABASE_URL;',
    "const port = process['env'].PORT;",
    'const { env: environment } = process;',
    'const all = globalThis.process.env;',
    'const own = { env: 1 }.env;',
    'const text = `sql.unsafe and process.env in a string`;',
  ].join('\n');
  expect(confinedCodeIn('src/example.ts', source).map(({ rule, line }) => `${line} ${rule}`)).toEqual([
    '1 sql',
    '3 sql',
    '4 sql',
    '5 sql',
    '6 sql',
    '8 environment',
    '9 sql',
    '10 sql',
    '11 sql',
    '12 sql',
    '13 sql',
    '14 environment',
    '15 environment',
    '16 environment',
    '17 environment',
  ]);
});
