import { ApiError } from '../errors';

/**
 * A scrape's `maxPricePoints` (docs/decisions.md, "json and summary", Bound): the most the request may charge,
 * its page's
 * tasks and its completions together. The page's tasks come first, each limited to an equal share of the
 * limit less the completions' floor; then each extraction's completions share what the page left, its
 * repair taking what its first attempt did not. Every task's charge is at most its maximum price, so the
 * request's charges add up to at most the limit.
 */

/** An amount as an integer count of 10^-scale points: exact sums, differences and floors. */
interface Scaled {
  units: bigint;
  scale: number;
}

/** Shares are cut to at least this many decimal places (a millionth of a point), finer when an amount is. */
const SHARE_SCALE = 6;

function scaled(text: string): Scaled {
  const [whole = '0', fraction = ''] = text.replace(/^\+/, '').split('.');
  const negative = whole.startsWith('-');
  const units = BigInt(`${whole.replace('-', '') || '0'}${fraction}`);
  return { units: negative ? -units : units, scale: fraction.length };
}

const rescale = (amount: Scaled, scale: number) => amount.units * 10n ** BigInt(scale - amount.scale);

function text({ units, scale }: Scaled): string {
  const sign = units < 0n ? '-' : '';
  const digits = (units < 0n ? -units : units).toString().padStart(scale + 1, '0');
  const whole = digits.slice(0, digits.length - scale);
  const fraction = digits.slice(digits.length - scale).replace(/0+$/, '');
  return `${sign}${whole}${fraction ? `.${fraction}` : ''}`;
}

/** The sum of `parts`. */
export function pointsSum(...parts: string[]): string {
  const all = parts.map(scaled);
  const scale = Math.max(0, ...all.map((part) => part.scale));
  return text({ units: all.reduce((units, part) => units + rescale(part, scale), 0n), scale });
}

/** `amount` less each of `parts`, at least 0. */
export function pointsLeft(amount: string, ...parts: string[]): string {
  const left = pointsSum(amount, ...parts.map((part) => (part.startsWith('-') ? part.slice(1) : `-${part}`)));
  return left.startsWith('-') ? '0' : left;
}

/** `amount` split `ways` ways, each share rounded down: the shares never add up to more than the amount. */
export function pointsShare(amount: string, ways: number): string {
  const value = scaled(amount);
  const scale = Math.max(value.scale, SHARE_SCALE);
  return text({ units: rescale(value, scale) / BigInt(Math.max(1, ways)), scale });
}

/** `a` < `b`. */
export function pointsBelow(a: string, b: string): boolean {
  const [x, y] = [scaled(a), scaled(b)];
  const scale = Math.max(x.scale, y.scale);
  return rescale(x, scale) < rescale(y, scale);
}

/** What a task's maximum price may be, given what the request's tasks already cost. */
export interface ScrapePriceLimit {
  /** Each page task's share: fetch (or render), screenshot. */
  pageShare: string;
  /** What a render after a fetch may cost: the page share less the fetch's cost. */
  afterFetch(fetchCost: string): string;
  /** Each extraction's share of what the page left. */
  extractionShare(pageCost: string): string;
}

/**
 * The limits of a scrape of `pageTasks` concurrent page tasks and `extractions` completions whose cheapest
 * estimate each is `completionFloor` (null: no strong-tier offer priced yet, so none is set aside).
 */
export function scrapePriceLimit(
  limit: string,
  input: { pageTasks: number; extractions: number; completionFloor: string | null },
): ScrapePriceLimit {
  const floor = input.completionFloor ?? '0';
  const reserved = Array.from({ length: input.extractions }, () => floor);
  if (pointsBelow(limit, pointsSum(...reserved))) throw belowCompletionFloor(limit, floor, input.extractions);
  const pageShare = pointsShare(pointsLeft(limit, ...reserved), input.pageTasks);
  return {
    pageShare,
    afterFetch: (fetchCost) => pointsLeft(pageShare, fetchCost),
    extractionShare: (pageCost) => pointsShare(pointsLeft(limit, pageCost), input.extractions),
  };
}

/** 422 no_solver_within_price: the limit cannot pay the cheapest completion of each extraction; nothing ran. */
function belowCompletionFloor(limit: string, floor: string, extractions: number): ApiError {
  return new ApiError(
    'no_solver_within_price',
    `maxPricePoints (${limit}) is below the cheapest completion online for ${extractions === 1 ? 'the extraction' : `each of the ${extractions} extractions`} ` +
      `(${floor} points each), before the page's price; raise it.`,
    { param: 'maxPricePoints' },
  );
}

/** 422 no_solver_within_price: no solver online serves `what` within its share of the scrape's maxPricePoints. */
export function scrapeWithinPrice(what: string): ApiError {
  return new ApiError(
    'no_solver_within_price',
    `No solver online serves ${what} within its share of maxPricePoints (docs/decisions.md, ` +
      `"json and summary", Bound); raise it.`,
    { param: 'maxPricePoints' },
  );
}
