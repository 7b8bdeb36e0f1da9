import { OpenAPIRegistry, OpenApiGeneratorV31 } from '@asteasolutions/zod-to-openapi';
import { SOLVER_PROTOCOL_VERSION } from './domain';
import { RESULT_SCHEMAS, SERVER_FRAMES, SOLVER_FRAMES } from './frames';
import { PAYLOAD_SCHEMAS, SolverCapability } from './requests';
import type { z } from './zod';

/**
 * JSON Schema (draft 2020-12) of every frame of the solver protocol, every result type and the
 * capabilities a solver registers (POST /v1/solver/capabilities), generated
 * from the zod schemas that check them, for solver authors in any language. Served at
 * GET /v1/solver/schemas and kept in docs/solver-schemas.json (a test checks that file is current).
 */

const pascal = (name: string) => name.replace(/(^|_)([a-z])/g, (_match, _sep, letter: string) => letter.toUpperCase());

let cached: Record<string, unknown> | undefined;

export function solverJsonSchemas(): Record<string, unknown> {
  if (cached) return cached;
  // OpenAPI 3.1 schema objects are JSON Schema 2020-12: the OpenAPI generator does the conversion.
  const registry = new OpenAPIRegistry();
  const names = {
    server_frames: Object.fromEntries(Object.keys(SERVER_FRAMES).map((type) => [type, `${pascal(type)}Frame`])),
    solver_frames: Object.fromEntries(Object.keys(SOLVER_FRAMES).map((type) => [type, `${pascal(type)}Frame`])),
    results: Object.fromEntries(Object.keys(RESULT_SCHEMAS).map((type) => [type, `${pascal(type)}Result`])),
    payloads: Object.fromEntries(Object.keys(PAYLOAD_SCHEMAS).map((type) => [type, `${pascal(type)}Payload`])),
  };
  const register = (schemas: Record<string, z.ZodTypeAny>, named: Record<string, string>) => {
    for (const [type, schema] of Object.entries(schemas)) registry.register(named[type], schema);
  };
  register(SERVER_FRAMES, names.server_frames);
  register(SOLVER_FRAMES, names.solver_frames);
  register(RESULT_SCHEMAS, names.results);
  register(PAYLOAD_SCHEMAS, names.payloads);
  registry.register('SolverCapability', SolverCapability);
  const components = new OpenApiGeneratorV31(registry.definitions).generateComponents() as {
    components?: { schemas?: Record<string, unknown> };
  };
  const text = JSON.stringify(components.components?.schemas ?? {}).replaceAll('"#/components/schemas/', '"#/$defs/');
  const refs = (named: Record<string, string>) =>
    Object.fromEntries(Object.entries(named).map(([type, name]) => [type, { $ref: `#/$defs/${name}` }]));
  cached = {
    $schema: 'https://json-schema.org/draft/2020-12/schema',
    $id: 'solver-protocol-v1.json',
    title: `Solver WebSocket protocol, version ${SOLVER_PROTOCOL_VERSION}`,
    description:
      'Every frame is one JSON object in a WebSocket text frame; its "type" names it. ' +
      'server_frames are sent by the marketplace, solver_frames by the solver, results[task_type] ' +
      'is what the "result" of a "result" frame must match, payloads[task_type] what the ' +
      '"payload" of a web task\'s "task" frame holds, and capability one record of POST ' +
      '/v1/solver/capabilities. Unknown fields are ignored in both directions.',
    protocol: SOLVER_PROTOCOL_VERSION,
    server_frames: refs(names.server_frames),
    solver_frames: refs(names.solver_frames),
    results: refs(names.results),
    payloads: refs(names.payloads),
    capability: { $ref: '#/$defs/SolverCapability' },
    anyOf: [...Object.values(names.server_frames), ...Object.values(names.solver_frames)].map((name) => ({
      $ref: `#/$defs/${name}`,
    })),
    $defs: JSON.parse(text),
  };
  return cached;
}
