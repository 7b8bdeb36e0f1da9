import fs from 'node:fs';

export default async function globalTeardown() {
  const state = (globalThis as Record<string, unknown>).__MARKETPLACE_TEST__ as
    | { dir: string; postgres: { stop(): Promise<void> }; temporal: { stop(): Promise<void> } }
    | undefined;
  if (!state) return;
  await state.temporal.stop();
  await state.postgres.stop();
  fs.rmSync(state.dir, { recursive: true, force: true });
}
