import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

/**
 * The layers of the service's code, lowest first (docs/decisions.md, "Code layers"). A module may import
 * its own layer and those below; an import of a higher layer is an upward import. Each entry is a whole
 * folder (`src/<name>`, `workflows`, `activities`) or a file directly in `src/`, never a part of a
 * folder, so that a folder's name says its layer. Within a layer the entries are listed lowest first too:
 * the list is the folder order, and a folder imports only itself and the folders listed before it.
 */
export const LAYERS: readonly { name: string; paths: readonly string[] }[] = [
  { name: 'contract', paths: ['src/contract'] },
  { name: 'foundation', paths: ['src/errors.ts', 'src/logger.ts', 'src/config.ts', 'src/schemas', 'src/types', 'src/safety'] },
  // Code without state of its own that the service and the bundled solver share: target rules, HTML,
  // search, the counters the layers above record into, webhook signing, the artifact store's client.
  { name: 'libraries', paths: ['src/policy', 'src/solver', 'src/metrics', 'src/signing', 'src/artifacts'] },
  { name: 'db', paths: ['src/db'] },
  // Temporal clients and the domain guard stand alone; chat relay, Firecrawl mapping and the solver hub
  // sit under trust, trust under the task engine, the engine under webhooks and crawls, and the services
  // the routes are given over them all.
  {
    name: 'services',
    paths: ['src/temporal', 'src/guard', 'src/chat', 'src/compat', 'src/dispatch', 'src/trust', 'src/tasks', 'src/webhooks', 'src/crawl', 'src/services'],
  },
  // Workflows import activities by type only.
  { name: 'orchestration', paths: ['activities', 'workflows'] },
  { name: 'interface', paths: ['src/http'] },
  { name: 'runtime', paths: ['src/embedded', 'src/runtime', 'src/bin'] },
];

/** The contract imports nothing of the project: workflow code and every layer read it. */
export const LEAF_LAYER = 'contract';

export interface Import {
  from: string;
  to: string;
  /** Only types are imported: nothing of it runs when the importer loads. */
  typeOnly: boolean;
  /** The names it imports as values (not as types), when it names them. */
  values?: string[];
}

const ROOT = path.resolve(__dirname, '..');
const SOURCE_ROOTS = ['src', 'workflows', 'activities'];
const EXTENSIONS = ['.ts', '/index.ts'];

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const relative = `${dir}/${entry.name}`;
    if (entry.isDirectory()) return sourceFiles(relative);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [relative] : [];
  });
}

/** The project file a relative specifier names, or null for a package or a file outside the sources. */
function resolve(from: string, specifier: string): string | null {
  if (!specifier.startsWith('.')) return null;
  const base = path.posix.normalize(path.posix.join(path.posix.dirname(from), specifier));
  const found = [base, ...EXTENSIONS.map((ext) => base + ext)].find((candidate) => candidate.endsWith('.ts') && fs.existsSync(path.join(ROOT, candidate)));
  return found ?? null;
}

/** The imports of a file: of the project's files, or (`packages`) of packages, named as imported. */
function importsOf(file: string, packages = false): Import[] {
  const source = ts.createSourceFile(file, fs.readFileSync(path.join(ROOT, file), 'utf8'), ts.ScriptTarget.Latest, false);
  const found: Import[] = [];
  const add = (specifier: ts.Expression | undefined, typeOnly: boolean, values?: string[]) => {
    if (!specifier || !ts.isStringLiteral(specifier)) return;
    const to = packages ? (specifier.text.startsWith('.') ? null : specifier.text) : resolve(file, specifier.text);
    if (to) found.push({ from: file, to, typeOnly, ...(values ? { values } : {}) });
  };
  const visit = (node: ts.Node) => {
    if (ts.isImportDeclaration(node)) {
      const clause = node.importClause;
      const named = clause?.namedBindings && ts.isNamedImports(clause.namedBindings) ? clause.namedBindings.elements : undefined;
      const typeOnly = !!clause && (clause.isTypeOnly || (!clause.name && !!named && named.length > 0 && named.every((element) => element.isTypeOnly)));
      const values = named && !clause?.isTypeOnly ? named.filter((element) => !element.isTypeOnly).map((element) => (element.propertyName ?? element.name).text) : undefined;
      add(node.moduleSpecifier, typeOnly, values);
    } else if (ts.isExportDeclaration(node)) {
      add(node.moduleSpecifier, node.isTypeOnly);
    } else if (ts.isCallExpression(node) && (node.expression.kind === ts.SyntaxKind.ImportKeyword || (ts.isIdentifier(node.expression) && node.expression.text === 'require'))) {
      add(node.arguments[0], false);
    } else if (ts.isImportTypeNode(node) && ts.isLiteralTypeNode(node.argument)) {
      add(node.argument.literal, true);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** Every import between the project's own source files. */
export function projectImports(): Import[] {
  return SOURCE_ROOTS.flatMap(sourceFiles).flatMap((file) => importsOf(file));
}

/** Every import of a package by the project's own source files. */
export function packageImports(): Import[] {
  return SOURCE_ROOTS.flatMap(sourceFiles).flatMap((file) => importsOf(file, true));
}

/**
 * The handles only the entry points hold, which the HTTP routes are never given, not even as a type:
 * the database pool, the notification bus and the Temporal client. Routes reach PostgreSQL and Temporal
 * through the task engine (src/tasks/engine.ts) and the services (src/services/), which return results
 * that the routes map to HTTP.
 */
export const HANDLES_KEPT_FROM_ROUTES = { importer: 'src/http', modules: ['src/db/pool.ts', 'src/db/notify.ts', '@temporalio/client'] } as const;

/** Imports of a handle (HANDLES_KEPT_FROM_ROUTES) by the HTTP layer. */
export function handleImports(imports: Import[]): Import[] {
  const { importer, modules } = HANDLES_KEPT_FROM_ROUTES;
  return imports.filter((edge) => edge.from.startsWith(`${importer}/`) && (modules as readonly string[]).includes(edge.to));
}

/**
 * The statements that write tasks, which only the task engine (src/tasks/) calls, besides src/db itself:
 * every value of these modules but the few that write nothing.
 */
export const TASK_WRITES = {
  modules: ['src/db/tasks/create.ts', 'src/db/tasks/attempts.ts', 'src/db/tasks/finish.ts'],
  owners: ['src/tasks', 'src/db'],
  /** A read and a channel name: no write. */
  readOnly: ['idempotencyKeyReused', 'TASK_FINISHED_CHANNEL'],
} as const;

/** Value imports of the task-writing statements (TASK_WRITES) from outside the engine. */
export function taskWritesOutsideEngine(imports: Import[]): Import[] {
  const { modules, owners, readOnly } = TASK_WRITES;
  return imports.filter(
    (edge) =>
      (modules as readonly string[]).includes(edge.to) &&
      !owners.some((owner) => edge.from.startsWith(`${owner}/`)) &&
      !edge.typeOnly &&
      (edge.values === undefined || edge.values.some((name) => !(readOnly as readonly string[]).includes(name))),
  );
}

/** The index in LAYERS of a file's layer, or -1 when no layer claims it. */
export function layerOf(file: string): number {
  let best = -1;
  let length = -1;
  LAYERS.forEach((layer, index) => {
    for (const entry of layer.paths) {
      if ((file === entry || file.startsWith(`${entry}/`)) && entry.length > length) [best, length] = [index, entry.length];
    }
  });
  return best;
}

export const importKey = (edge: Pick<Import, 'from' | 'to'>) => `${edge.from} -> ${edge.to}`;

/** Imports from a lower layer up to a higher one, and any import out of the leaf layer. */
export function upwardImports(imports: Import[]): Import[] {
  const leaf = LAYERS.findIndex((layer) => layer.name === LEAF_LAYER);
  return imports.filter((edge) => {
    const [from, to] = [layerOf(edge.from), layerOf(edge.to)];
    return to > from || (from === leaf && to !== leaf);
  });
}

/**
 * The import cycles, each as the files around it: one per strongly connected group of files (Tarjan).
 * Type-only imports count: they load nothing, but two modules that name each other's types are one.
 */
export function importCycles(imports: Import[]): string[][] {
  const next = new Map<string, string[]>();
  for (const edge of imports) next.set(edge.from, [...(next.get(edge.from) ?? []), edge.to]);
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const connect = (file: string) => {
    index.set(file, index.size);
    low.set(file, index.get(file)!);
    stack.push(file);
    onStack.add(file);
    for (const to of next.get(file) ?? []) {
      if (!index.has(to)) {
        connect(to);
        low.set(file, Math.min(low.get(file)!, low.get(to)!));
      } else if (onStack.has(to)) low.set(file, Math.min(low.get(file)!, index.get(to)!));
    }
    if (low.get(file) !== index.get(file)) return;
    const group: string[] = [];
    let member: string;
    do {
      member = stack.pop()!;
      onStack.delete(member);
      group.push(member);
    } while (member !== file);
    if (group.length > 1) cycles.push(group.sort());
  };
  for (const file of next.keys()) if (!index.has(file)) connect(file);
  return cycles;
}

/**
 * The folder of a file in the folder order: `src/<name>` for a file in a folder of src/ (at any depth:
 * src/db/tasks/x.ts is in src/db), a file directly in src/ as itself, otherwise its top folder.
 */
export function folderOf(file: string): string {
  const parts = file.split('/');
  return parts[0] === 'src' ? parts.slice(0, 2).join('/') : parts[0];
}

/** The entries of LAYERS that are a part of a folder rather than a whole one. */
export function partialLayerEntries(): string[] {
  return LAYERS.flatMap((layer) => layer.paths).filter((entry) => folderOf(entry) !== entry);
}

/** An import between two folders, with the file imports that make it. */
export interface FolderImport {
  from: string;
  to: string;
  /** Every file import behind it imports types only. */
  typeOnly: boolean;
  files: Import[];
}

/** The imports between folders (folderOf), each with the file imports behind it; type-only imports count. */
export function folderImports(imports: Import[]): FolderImport[] {
  const found = new Map<string, FolderImport>();
  for (const edge of imports) {
    const [from, to] = [folderOf(edge.from), folderOf(edge.to)];
    if (from === to) continue;
    const key = `${from} -> ${to}`;
    const folderEdge = found.get(key) ?? { from, to, typeOnly: true, files: [] };
    folderEdge.typeOnly &&= edge.typeOnly;
    folderEdge.files.push(edge);
    found.set(key, folderEdge);
  }
  return [...found.values()];
}

/** The folder-level import cycles, each as the folders around it (importCycles over folderImports). */
export const folderCycles = (imports: Import[]): string[][] => importCycles(folderImports(imports));

/** A folder's place in the folder order (LAYERS, lowest first); a folder no entry names comes last. */
export function folderRank(folder: string): number {
  const rank = LAYERS.flatMap((layer) => layer.paths).indexOf(folder);
  return rank < 0 ? Number.MAX_SAFE_INTEGER : rank;
}

/** Imports of a folder listed after the importer in LAYERS: against the folder order. */
export const foldersImportedOutOfOrder = (imports: Import[]): FolderImport[] =>
  folderImports(imports).filter((edge) => folderRank(edge.to) > folderRank(edge.from));

/** A folder import as one line, naming the file imports behind it (the first three, and how many more). */
export function folderImportKey(edge: FolderImport): string {
  const shown = edge.files.slice(0, 3).map((file) => `${importKey(file)}${file.typeOnly ? ' (type)' : ''}`);
  const more = edge.files.length > shown.length ? `; ${edge.files.length - shown.length} more` : '';
  return `${edge.from} -> ${edge.to}: ${shown.join('; ')}${more}`;
}

/** The folder imports inside each folder cycle, as folderImportKey lines: what to cut to end it. */
export function folderCycleImports(imports: Import[]): string[] {
  const folderEdges = folderImports(imports);
  return folderCycles(imports).flatMap((cycle) =>
    folderEdges.filter((edge) => cycle.includes(edge.from) && cycle.includes(edge.to)).map(folderImportKey),
  );
}

/**
 * Code confined to one place (docs/decisions.md, "Code layers"): each rule names the folder or file
 * that alone may hold it. `sql`: SQL, which src/db alone writes and runs (slonik's `sql` tag, slonik's
 * `sql` imported as a value, a database driver imported as a value). `environment`: the process's
 * environment, which src/config.ts alone reads (`process.env` however it is reached).
 */
export const CONFINED = {
  sql: { owner: 'src/db', what: 'SQL outside src/db' },
  environment: { owner: 'src/config.ts', what: 'process.env outside src/config.ts' },
} as const;
export type ConfinedRule = keyof typeof CONFINED;

export interface Confinement {
  rule: ConfinedRule;
  file: string;
  /** 1-based. */
  line: number;
  /** The code found, on one line. */
  code: string;
}

/** slonik's packages, whose `sql` (or its factory) writes SQL; a type (CommonQueryMethods) writes none. */
const SQL_PACKAGES = /^(slonik|@slonik\/.+)$/;
const SQL_TAG_NAMES = ['sql', 'createSqlTag'];
/** Database drivers: a value imported from one runs SQL. */
const DRIVER_PACKAGES = /^(pg|pg-.+|postgres)$/;
const PROCESS_MODULES = ['process', 'node:process'];

const owns = (owner: string, file: string) => file === owner || file.startsWith(`${owner}/`);

/** The identifier a tag or property chain starts from (`sql` of `sql.type(Row)`), if any. */
function rootIdentifier(node: ts.Node): ts.Identifier | undefined {
  let current = node;
  for (;;) {
    if (ts.isIdentifier(current)) return current;
    if (ts.isPropertyAccessExpression(current) || ts.isElementAccessExpression(current) || ts.isCallExpression(current) || ts.isNonNullExpression(current) || ts.isParenthesizedExpression(current)) {
      current = current.expression;
    } else return undefined;
  }
}

/** `process`, or `<anything>.process` (globalThis.process). */
const isProcess = (node: ts.Expression) =>
  (ts.isIdentifier(node) && node.text === 'process') || (ts.isPropertyAccessExpression(node) && node.name.text === 'process');

/** The confined code in one file's text (every rule, whoever owns it; confinedCode() leaves out the owners). */
export function confinedCodeIn(file: string, text: string): Confinement[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found: Confinement[] = [];
  const add = (rule: ConfinedRule, node: ts.Node) => {
    const line = source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
    found.push({ rule, file, line, code: node.getText(source).replace(/\s+/g, ' ').slice(0, 120) });
  };
  const importedValues = (clause: ts.ImportClause | undefined): string[] | 'all' => {
    if (!clause || clause.isTypeOnly) return [];
    if (clause.name) return 'all';
    const bindings = clause.namedBindings;
    if (!bindings) return [];
    if (ts.isNamespaceImport(bindings)) return 'all';
    return bindings.elements.filter((element) => !element.isTypeOnly).map((element) => (element.propertyName ?? element.name).text);
  };
  const moduleImport = (node: ts.Node, specifier: string, values: string[] | 'all') => {
    if (SQL_PACKAGES.test(specifier) && (values === 'all' || values.some((name) => SQL_TAG_NAMES.includes(name)))) add('sql', node);
    if (DRIVER_PACKAGES.test(specifier) && (values === 'all' || values.length > 0)) add('sql', node);
    if (PROCESS_MODULES.includes(specifier) && values !== 'all' && values.includes('env')) add('environment', node);
  };
  const visit = (node: ts.Node) => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      moduleImport(node, node.moduleSpecifier.text, importedValues(node.importClause));
    } else if (ts.isImportEqualsDeclaration(node) && !node.isTypeOnly && ts.isExternalModuleReference(node.moduleReference) && ts.isStringLiteral(node.moduleReference.expression)) {
      moduleImport(node, node.moduleReference.expression.text, 'all');
    } else if (
      ts.isCallExpression(node) &&
      (node.expression.kind === ts.SyntaxKind.ImportKeyword || (ts.isIdentifier(node.expression) && node.expression.text === 'require')) &&
      node.arguments[0] &&
      ts.isStringLiteralLike(node.arguments[0])
    ) {
      moduleImport(node, node.arguments[0].text, 'all');
    } else if (ts.isTaggedTemplateExpression(node)) {
      if (rootIdentifier(node.tag)?.text === 'sql') add('sql', node.tag);
    } else if (ts.isPropertyAccessExpression(node) && node.name.text === 'env' && isProcess(node.expression)) {
      add('environment', node);
    } else if (ts.isElementAccessExpression(node) && isProcess(node.expression) && ts.isStringLiteralLike(node.argumentExpression) && node.argumentExpression.text === 'env') {
      add('environment', node);
    } else if (ts.isVariableDeclaration(node) && node.initializer && isProcess(node.initializer) && ts.isObjectBindingPattern(node.name)) {
      const env = node.name.elements.find((element) => {
        const key = element.propertyName ?? element.name;
        return (ts.isIdentifier(key) || ts.isStringLiteralLike(key)) && key.text === 'env';
      });
      if (env) add('environment', node);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

/** SQL outside src/db and process.env outside src/config.ts (CONFINED), in src/, workflows/ and activities/. */
export function confinedCode(): Confinement[] {
  return SOURCE_ROOTS.flatMap(sourceFiles).flatMap((file) =>
    confinedCodeIn(file, fs.readFileSync(path.join(ROOT, file), 'utf8')).filter((found) => !owns(CONFINED[found.rule].owner, file)),
  );
}

export const confinementKey = (found: Confinement) => `${found.file}:${found.line}: ${CONFINED[found.rule].what}: ${found.code}`;
