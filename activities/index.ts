import type { Db } from '../src/db/pool';
import type { Logger } from '../src/logger';
import type { Config } from '../src/config';

export interface ActivityDeps {
  config: Config;
  db: Db;
  logger: Logger;
}

/** Activities are built by a factory: the worker entry point owns the pools and clients they use. */
export function createActivities(deps: ActivityDeps) {
  return {
    async echo(message: string): Promise<string> {
      return message;
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
