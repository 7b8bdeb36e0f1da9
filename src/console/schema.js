// A small JSON Schema (2020-12) checker for the result schemas of docs/solver-schemas.json: the keywords they use.

export function validate(schema, value, root = schema, path = []) {
  const problems = [];
  const at = (msg) => problems.push({ loc: path.join('.') || '(result)', msg });
  if (schema === true || schema === undefined) return problems;
  if (schema.$ref) return validate(resolve(root, schema.$ref), value, root, path);
  if (schema.anyOf && !schema.anyOf.some((branch) => validate(branch, value, root, path).length === 0)) at('matches none of the allowed forms');
  if (schema.oneOf && schema.oneOf.filter((branch) => validate(branch, value, root, path).length === 0).length !== 1) at('must match exactly one allowed form');
  if (schema.const !== undefined && value !== schema.const) at(`must be ${JSON.stringify(schema.const)}`);
  if (schema.enum && !schema.enum.includes(value)) at(`must be one of ${schema.enum.map((v) => JSON.stringify(v)).join(', ')}`);
  const types = schema.type === undefined ? [] : [].concat(schema.type);
  if (types.length && !types.some((type) => isType(type, value))) {
    at(`must be ${types.join(' or ')}`);
    return problems;
  }
  if (typeof value === 'string') {
    if (schema.minLength !== undefined && value.length < schema.minLength) at(`must have at least ${schema.minLength} characters`);
    if (schema.maxLength !== undefined && value.length > schema.maxLength) at(`must have at most ${schema.maxLength} characters`);
  }
  if (typeof value === 'number') {
    if (schema.minimum !== undefined && value < schema.minimum) at(`must be ≥ ${schema.minimum}`);
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) at(`must be > ${schema.exclusiveMinimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) at(`must be ≤ ${schema.maximum}`);
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) at(`must have at least ${schema.minItems} items`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems) at(`must have at most ${schema.maxItems} items`);
    if (schema.items) value.forEach((item, index) => problems.push(...validate(schema.items, item, root, [...path, index])));
  }
  if (value && typeof value === 'object' && !Array.isArray(value)) {
    for (const name of schema.required ?? []) if (!(name in value)) problems.push({ loc: [...path, name].join('.'), msg: 'is required' });
    for (const [name, sub] of Object.entries(schema.properties ?? {})) if (name in value) problems.push(...validate(sub, value[name], root, [...path, name]));
    if (schema.additionalProperties === false) {
      for (const name of Object.keys(value)) if (!(name in (schema.properties ?? {}))) problems.push({ loc: [...path, name].join('.'), msg: 'is not allowed' });
    }
  }
  return problems;
}

function isType(type, value) {
  switch (type) {
    case 'null': return value === null;
    case 'integer': return Number.isInteger(value);
    case 'number': return typeof value === 'number' && Number.isFinite(value);
    case 'array': return Array.isArray(value);
    case 'object': return value !== null && typeof value === 'object' && !Array.isArray(value);
    default: return typeof value === type;
  }
}

function resolve(root, ref) {
  return ref.replace(/^#\//, '').split('/').reduce((node, part) => node?.[decodeURIComponent(part)], root);
}
