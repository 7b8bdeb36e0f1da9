import { Router } from 'express';
import { canaryPage, canaryPageOf } from '../../trust/canaries';
import type { AppDeps } from '../deps';

/**
 * The pages canary tasks point solvers at (docs/trust.md): public, plain HTML with the canary's token
 * in its text (for a screenshot, in its pixels). An unknown id is an ordinary 404 page.
 */
export function canaryRoutes(deps: AppDeps): Router {
  const router = Router();
  router.get('/canary/:canaryId', async (req, res, next) => {
    try {
      const page = await canaryPageOf(deps.db, req.params.canaryId);
      res
        .status(page ? 200 : 404)
        .type('html')
        .set('Cache-Control', 'no-store')
        .send(page ? canaryPage(page.token, page.taskType) : '<!doctype html><title>Not found</title>');
    } catch (error) {
      next(error);
    }
  });
  return router;
}
