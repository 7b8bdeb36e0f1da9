import { z } from './zod';

/** Optional sign, digits with an optional decimal point, not made only of signs and dots. */
export const DECIMAL_PATTERN = /^[+-]?(\d+(\.\d*)?|\.\d+)$/;

/** Canonical decimal text for an amount given as number or string ("010.50" → "10.50"). */
export function decimalText(value: number | string): string {
  const text = typeof value === 'number' ? value.toString() : value.trim();
  if (/e/i.test(text)) return Number(text).toFixed(20).replace(/\.?0+$/, '');
  const unsigned = text.replace(/^\+/, '');
  const [whole, fraction] = unsigned.split('.');
  const cleanWhole = (whole ?? '').replace(/^(-?)0+(?=\d)/, '$1') || '0';
  return fraction ? `${cleanWhole}.${fraction}` : cleanWhole;
}

/** A number >= 0, or a decimal string (api-spec "Numeric string"). */
export const NonNegativeNumeric = z
  .union([z.number().min(0), z.string().regex(DECIMAL_PATTERN, 'decimal')])
  .openapi({ description: 'A number >= 0 or a decimal string', example: '10' });

/** Any number, or a decimal string. */
export const Numeric = z
  .union([z.number(), z.string().regex(DECIMAL_PATTERN, 'decimal')])
  .openapi({ description: 'A number or a decimal string', example: '100' });

/** An integer; the marker message lets the 422 mapper say int_type rather than float_type. */
export const Int = () => z.number({ invalid_type_error: 'int_type' }).int();
export const PositiveInt = Int().gt(0);

export const ErrorBody = z
  .object({ error: z.object({ type: z.string(), message: z.string() }).passthrough() })
  .openapi('Error');

export const ValidationErrorBody = z
  .object({
    detail: z
      .array(
        z.object({
          loc: z.array(z.union([z.string(), z.number().int()])),
          msg: z.string(),
          type: z.string(),
          input: z.any().optional(),
          ctx: z.record(z.any()).optional(),
        }),
      )
      .optional(),
  })
  .openapi('HTTPValidationError');

export const StringMap = z.record(z.string());
export const FreeForm = z.record(z.any());
