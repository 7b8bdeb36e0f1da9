/** A refinement names its pydantic error type with `params: { pydantic: {...} }`; the 422 mapper reads it. */
export const pydanticIssue = (type: string, msg: string, ctx?: Record<string, unknown>) => ({ params: { pydantic: { type, msg, ctx } } });
