import { StringMap } from '../../schemas/common';
import type { AppDeps } from '../deps';
import { route, type Route } from '../route';

export function healthRoutes(deps: AppDeps): Route[] {
  return [
    route({
      method: 'get',
      path: '/health',
      summary: 'Liveness',
      tag: 'health',
      auth: 'none',
      response: StringMap,
      // Liveness only: cheap and without dependencies, so a load balancer never flaps on a slow database.
      handler: (_req, res) => {
        res.json({ status: 'ok', version: '0.1.0', node_id: deps.nodeId });
      },
    }),
  ];
}
