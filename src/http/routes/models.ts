import { Router } from 'express';
import { ApiError } from '../../errors';
import { MODEL_ALIASES, PUBLIC_MODEL_ID } from '../../schemas/domain';
import type { AppDeps } from '../deps';

// A fixed creation time keeps the descriptor stable across nodes and restarts.
const MODEL_CREATED = 1_767_225_600;

export function modelRoutes(deps: AppDeps): Router {
  const router = Router();
  const descriptor = () => ({
    id: PUBLIC_MODEL_ID,
    object: 'model',
    created: MODEL_CREATED,
    owned_by: 'service',
    aliases: Object.keys(MODEL_ALIASES).filter((alias) => alias !== PUBLIC_MODEL_ID),
    tier: 'strong',
    description: 'Routed only to strong-tier solvers running a model on the approved allowlist.',
    allowlist: deps.strongModels(),
  });

  router.get('/v1/models', (_req, res) => {
    res.json({ object: 'list', data: [descriptor()] });
  });

  // Model ids contain a slash ("service/strong"), so the whole remaining path is the id (the router decodes it).
  router.get(/^\/v1\/models\/(.+)$/, (req, res) => {
    const requested = (req.params as unknown as string[])[0];
    if (!MODEL_ALIASES[requested]) {
      throw new ApiError('model_not_found', `No model "${requested}". The public model is "${PUBLIC_MODEL_ID}" (alias "strong").`);
    }
    res.json(descriptor());
  });

  return router;
}
