import { Router } from 'express';
import type { AppDeps } from '../deps';

export function healthRoutes(deps: AppDeps): Router {
  const router = Router();
  // Liveness only: cheap and without dependencies, so a load balancer never flaps on a slow database.
  router.get('/health', (_req, res) => {
    res.json({ status: 'ok', version: '0.1.0', node_id: deps.nodeId });
  });
  return router;
}
