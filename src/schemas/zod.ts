import { z } from 'zod';
import { extendZodWithOpenApi } from '@asteasolutions/zod-to-openapi';

// Every schema module imports z from here so that `.openapi()` metadata is always available.
extendZodWithOpenApi(z);

export { z };
