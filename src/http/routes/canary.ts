import { Router } from 'express';
import { isStorableText } from '../../schemas/text';
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
      // No canary id holds a NUL (nor could PostgreSQL compare one): such a path is simply not a canary.
      const page = isStorableText(req.params.canaryId) ? await canaryPageOf(deps.db, req.params.canaryId) : null;
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
