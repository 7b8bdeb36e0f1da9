import type { Request, Response } from 'express';
import { ApiError } from '../../errors';
import { MODEL_ALIASES, PUBLIC_MODEL_ID } from '../../schemas/domain';
import { z } from '../../schemas/zod';
import type { AppDeps } from '../deps';
import { route, type Route } from '../route';

// A fixed creation time keeps the descriptor stable across nodes and restarts.
const MODEL_CREATED = 1_767_225_600;

const ModelParams = z.object({ model: z.string().openapi({ description: 'service/strong or strong' }) });

export function modelRoutes(deps: AppDeps): Route[] {
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

  function getModel(req: Request, res: Response) {
    const requested = (req.params as unknown as string[])[0];
    if (!MODEL_ALIASES[requested]) {
      throw new ApiError(
        'model_not_found',
        `No model "${requested}". The public model is "${PUBLIC_MODEL_ID}" (alias "strong").`,
      );
    }
    res.json(descriptor());
  }

  function getModels(_req: Request, res: Response) {
    res.json({ object: 'list', data: [descriptor()] });
  }

  return [
    route({
      method: 'get',
      path: '/v1/models',
      summary: 'Public models',
      tag: 'inference',
      auth: 'none',
      openai: true,
      handler: getModels,
    }),
    route({
      method: 'get',
      path: '/v1/models/{model}',
      // Model ids contain a slash ("service/strong"), so the whole remaining path is the id (the router decodes it).
      expressPath: /^\/v1\/models\/(.+)$/,
      summary: 'A model descriptor (service/strong or strong)',
      tag: 'inference',
      auth: 'none',
      params: ModelParams,
      errors: ['model_not_found'],
      openai: true,
      handler: getModel,
    }),
  ];
}
