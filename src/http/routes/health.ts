import type { Request, Response } from 'express';
import { StringMap } from '../../schemas/common';
import { Readiness } from '../../schemas/responses';
import type { AppDeps } from '../deps';
import { route, routesAt, type Route } from '../route';

/** Both spellings probes use: `/ready`, and Kubernetes' `/readyz`. */
export const READINESS_PATHS = ['/ready', '/readyz'];

export function healthRoutes(deps: AppDeps): Route[] {
  function getHealth(_req: Request, res: Response) {
    res.json({ status: 'ok', version: '0.1.0', node_id: deps.nodeId });
  }

  return [
    route({
      method: 'get',
      path: '/health',
      summary: 'Liveness',
      tag: 'health',
      auth: 'none',
      response: StringMap,
      // Liveness only: cheap and without dependencies, so a load balancer never flaps on a slow database.
      handler: getHealth,
    }),
    ...routesAt(READINESS_PATHS, {
      summary:
        'Readiness: 200 when this node can serve (PostgreSQL and Temporal answer, its Temporal ' +
        'workers poll), 503 naming the part that cannot',
      method: 'get',
      tag: 'health',
      auth: 'none',
      response: Readiness,
      otherAnswers: {
        503: { description: 'Not ready: a part is not ok, or the node is draining (the same body)', schema: Readiness },
      },
      handler: async (_req, res) => {
        const { ready, body } = await deps.readiness.report();
        // A probe's answer is about this moment: never kept by a cache between the balancer and the node.
        res
          .status(ready ? 200 : 503)
          .set('Cache-Control', 'no-store')
          .json(body);
      },
    }),
  ];
}
