// Writes docs/solver-schemas.json, the JSON Schema of the solver protocol, from the zod schemas
// (`npm run schemas`; test/solver-schemas.test.ts fails while the file is out of date).
import fs from 'node:fs';
import path from 'node:path';
import { solverJsonSchemas } from '../src/schemas/json-schema';

export const SOLVER_SCHEMAS_FILE = path.resolve(__dirname, '..', 'docs', 'solver-schemas.json');

export const solverSchemasText = () => `${JSON.stringify(solverJsonSchemas(), null, 2)}\n`;

if (require.main === module) {
  fs.writeFileSync(SOLVER_SCHEMAS_FILE, solverSchemasText());
  console.log(`wrote ${path.relative(process.cwd(), SOLVER_SCHEMAS_FILE)}`);
}
